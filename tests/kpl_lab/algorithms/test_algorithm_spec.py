"""environment.yml parsing and validation: every problem, with file, line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kpl_lab.algorithms.errors import AlgorithmError, Problem
from kpl_lab.algorithms.spec import load_environment, parse_environment
from kpl_lab.engine.launch import Resources

DATA = Path(__file__).parent / "data"


def problems_of(text: str) -> list[str]:
    with pytest.raises(AlgorithmError) as info:
        parse_environment(textwrap.dedent(text))
    return [str(problem) for problem in info.value.problems]


def test_seed_reference_file_is_valid_and_typed():
    spec = load_environment(DATA / "seed_environment.yml")
    assert spec.version == 1
    assert spec.image.from_image == "hub.kce.ksyun.com/kpl_k8s/pytorch:cuda10.0-py3-v1.2.0"
    assert spec.image.runs[0].startswith("pip3 install kpl-dataset kpl-helper matplotlib==2.2.4")
    assert list(spec.functions) == ["train", "test", "infer", "compile"]
    train = spec.function("train")
    assert train.cmd == "python3 train.py"
    assert train.resource.limits.cpu == 4.0 and train.resource.limits.gpu == 1
    assert train.resource.limits.memory == 10240 and train.resource.limits.shm == 1024
    assert train.resource.requests is not None and train.resource.requests.memory == 10240
    assert [(p.key, p.name) for p in train.inputs] == [("data", "数据"), ("model", "预训练模型")]
    assert [p.key for p in train.outputs] == ["save"]
    assert spec.function("infer").output == "/output"
    assert spec.function("test").resource.requests is None
    assert spec.to_dict()["functions"]["compile"]["cmd"] == "python3 compile.py"


def test_seed_as_printed_reports_every_ocr_typo():
    with pytest.raises(AlgorithmError) as info:
        load_environment(DATA / "seed_ocr_environment.yml")
    assert [str(p) for p in info.value.problems] == [
        "train.cmd: missing; the command that starts this function is required (seed_ocr_environment.yml:5)",
        "train.resource.limits.gpu: duplicate field (first defined at line 9) (seed_ocr_environment.yml:10)",
        'train.cad: unknown field; did you mean "cmd"? (seed_ocr_environment.yml:26)',
        "infer.cmd: missing; the command that starts this function is required (seed_ocr_environment.yml:27)",
        'infer.inputs[1].key: duplicate key "model" (first used at line 34) (seed_ocr_environment.yml:36)',
        'infer.cad: unknown field; did you mean "cmd"? (seed_ocr_environment.yml:38)',
        "infer: duplicate field (first defined at line 27) (seed_ocr_environment.yml:39)",
        "infer.outputs: duplicate field (first defined at line 50) (seed_ocr_environment.yml:53)",
    ]
    assert str(info.value).startswith("8 problems:\n  - train.cmd")


def test_memory_as_text_names_file_line_and_field():
    assert problems_of(
        """\
        version: 1
        train:
          resource:
            limits:
              cpu: 4
              memory: 10G
          cmd: python3 train.py
        """
    ) == ['train.resource.limits.memory: expected megabytes as an integer, got "10G" (environment.yml:6)']


def test_every_resource_type_error_is_reported():
    assert problems_of(
        """\
        train:
          resource:
            limits:
              cpu: 500m
              gpu: 0.5
              npu: -1
              memory: 1.5
              shm: true
          cmd: run
        """
    ) == [
        'train.resource.limits.cpu: expected a number of CPU cores above 0, got "500m" (environment.yml:4)',
        "train.resource.limits.gpu: expected a whole number of GPUs (0 or more), got 0.5 (environment.yml:5)",
        "train.resource.limits.npu: expected a whole number of NPUs (0 or more), got -1 (environment.yml:6)",
        "train.resource.limits.memory: expected megabytes as an integer, got 1.5 (environment.yml:7)",
        "train.resource.limits.shm: expected megabytes as an integer, got true (environment.yml:8)",
    ]


def test_requests_above_limits():
    assert problems_of(
        """\
        train:
          resource:
            limits: {cpu: 2, memory: 1024, gpu: 1}
            requests:
              cpu: 2.5
              memory: 512
              gpu: 2
          cmd: run
        """
    ) == [
        "train.resource.requests.cpu: request 2.5 is above the limit 2 (environment.yml:5)",
        "train.resource.requests.gpu: request 2 is above the limit 1 (environment.yml:7)",
    ]


def test_workers_must_be_a_positive_integer():
    for value in ('"x"', "0", "1.5", "true"):
        text = f"train:\n  resource:\n    workers: {value}\n  cmd: run\n"
        assert problems_of(text) == [
            f"train.resource.workers: expected a positive integer, got {value} (environment.yml:3)"
        ]
    spec = parse_environment(
        "train:\n  resource:\n    limits: {cpu: 2, gpu: 1}\n    workers: 2\n  cmd: run\n"
    )
    assert spec.function("train").resource.workers == 2
    resources = Resources.of(spec.function("train"), Resources(cpu=1, memory=2048, shm=128))
    assert resources == Resources(cpu=2.0, memory=2048, shm=128, devices={"gpu": 1}, workers=2)
    assert resources.total() == Resources(cpu=4.0, memory=4096, shm=256, devices={"gpu": 2}, workers=1)


def test_unknown_keys_get_suggestions():
    assert problems_of(
        """\
        version: 1
        trian:
          cmd: run
        test:
          resrouce: {}
          inptus: []
          cmd: run
          colour: red
        """
    ) == [
        'trian: unknown field; did you mean "train"? (environment.yml:2)',
        'test.resrouce: unknown field; did you mean "resource"? (environment.yml:5)',
        'test.inptus: unknown field; did you mean "inputs"? (environment.yml:6)',
        "test.colour: unknown field (expected one of: resource, inputs, outputs, cmd, output) (environment.yml:8)",
    ]


def test_no_function_is_an_error():
    assert problems_of(
        """\
        version: 1
        image:
          runs: []
        """
    ) == [
        "no function defined; expected at least one of train, test, infer, deploy, compile (environment.yml:1)"
    ]


def test_inputs_keys_must_be_unique_and_well_formed():
    assert problems_of(
        """\
        infer:
          inputs:
            - key: data
            - key: my data
            - name: no key
            - key: data
            - key: ok
              name: 42
            - just text
          cmd: run
        """
    ) == [
        "infer.inputs[1].key: expected letters, digits, '_' or '-', got \"my data\" (environment.yml:4)",
        "infer.inputs[2].key: missing; every input and output needs a key (environment.yml:5)",
        'infer.inputs[3].key: duplicate key "data" (first used at line 3) (environment.yml:6)',
        "infer.inputs[4].name: expected a display name as text, got 42 (environment.yml:8)",
        'infer.inputs[5]: expected a mapping with key, name and optional, got "just text" (environment.yml:9)',
    ]


def test_an_input_may_be_optional():
    spec = parse_environment(
        "train:\n  inputs:\n    - key: data\n    - key: checkpoint\n      optional: true\n  cmd: run\n"
    )
    assert [(p.key, p.optional) for p in spec.function("train").inputs] == [
        ("data", False),
        ("checkpoint", True),
    ]
    assert problems_of(
        """\
        train:
          inputs:
            - key: checkpoint
              optional: maybe
          cmd: run
        """
    ) == ['train.inputs[0].optional: expected true or false, got "maybe" (environment.yml:4)']


def test_image_and_version_and_cmd_types():
    assert problems_of(
        """\
        version: 2
        image:
          from_image: [a]
          runs: pip install x
        deploy:
          cmd: [python, serve.py]
        """
    ) == [
        "version: unsupported version 2; this platform reads version 1 (environment.yml:1)",
        'image.from_image: expected an image name as text, got ["a"] (environment.yml:3)',
        'image.runs: expected a list of shell lines, got "pip install x" (environment.yml:4)',
        'deploy.cmd: expected a command line as text, got ["python", "serve.py"] (environment.yml:6)',
    ]


def test_invalid_yaml_reports_line_and_column():
    with pytest.raises(AlgorithmError) as info:
        parse_environment("train:\n  cmd: run\n  inputs: [a\n")
    (problem,) = info.value.problems
    assert problem.file == "environment.yml" and problem.line == 4 and problem.column == 1
    assert str(problem).startswith("invalid YAML: while parsing a flow sequence")


def test_unbounded_yaml_is_refused_with_its_position():
    assert problems_of("train:\n  cmd: &c run\ntest:\n  cmd: *c\n") == [
        "anchor &c: anchors and aliases are not accepted; write the value out (environment.yml:2:8)"
    ]
    assert problems_of("version: 1\ntrain: " + "[" * 2048) == [
        "lists and mappings nest deeper than 64 levels (environment.yml:2:71)"
    ]
    assert problems_of("version: 1\nimage: {from_image: x, runs: [2024-13-01]}\n") == [
        "cannot read the value '2024-13-01': month must be in 1..12 (environment.yml:2:31)"
    ]


def test_tabs_are_a_yaml_error_with_position():
    with pytest.raises(AlgorithmError) as info:
        parse_environment("train:\n\tcmd: run\n")
    assert str(info.value.problems[0]).endswith("(environment.yml:2:1)")


def test_empty_and_non_mapping_and_non_utf8():
    assert problems_of("") == ["the file is empty; expected version, image and functions (environment.yml:1)"]
    assert problems_of("- a\n") == [
        'expected a mapping of version, image and functions, got ["a"] (environment.yml:1)'
    ]
    with pytest.raises(AlgorithmError, match=r"not UTF-8 text \(byte 7\) \(environment.yml\)"):
        parse_environment(b"train: \xff\n")


def test_minimal_function_and_defaults():
    spec = parse_environment("train:\n  cmd: python train.py\n")
    assert spec.version == 1 and spec.image.runs == () and spec.image.from_image is None
    train = spec.function("train")
    assert train.inputs == () and train.resource.limits.cpu is None
    with pytest.raises(AlgorithmError, match=r"no infer function \(defined: train\)"):
        spec.function("infer")


def test_launch_resources_fill_gaps_from_defaults():
    spec = parse_environment("train:\n  resource:\n    limits: {cpu: 2, gpu: 1}\n  cmd: run\n")
    resources = Resources.of(spec.function("train"), Resources(cpu=1, memory=2048, shm=128))
    assert resources == Resources(cpu=2.0, memory=2048, shm=128, devices={"gpu": 1})


def test_problem_formatting_without_file():
    assert str(Problem("lr", "expected a number")) == "lr: expected a number"
    assert str(Problem("", "bad", "f.yml", 3, 4)) == "bad (f.yml:3:4)"
