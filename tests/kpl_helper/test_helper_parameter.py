"""get_parameter, write_parameter and the attribute-access dict they return."""

from __future__ import annotations

import copy
import inspect
import json
import pickle
import sys

import pytest
import yaml

from kpl_helper import get_parameter, write_parameter
from kpl_helper.parameter import DotDict, write_parameter_file

PARAMETER_YML = """\
KEY1:
  KEY2: VALUE
lr: 0.01
layers:
  - {name: conv, size: 3}
  - [{name: inner}]
"""


@pytest.fixture
def parameter_yml(tmp_path):
    path = tmp_path / "parameter.yml"
    path.write_text(PARAMETER_YML)
    return path


def test_outside_reads_the_default_file(parameter_yml):
    p = get_parameter(default=str(parameter_yml))
    assert p.KEY1.KEY2 == "VALUE"
    assert p["KEY1"]["KEY2"] == "VALUE"
    assert p.lr == 0.01
    assert p.layers[0].name == "conv"
    assert p.layers[1][0].name == "inner"


def test_same_object_each_call(parameter_yml):
    first = get_parameter(default=str(parameter_yml))
    first.lr = 0.5
    assert get_parameter(default=str(parameter_yml)).lr == 0.5


def test_no_parameters_anywhere():
    with pytest.raises(LookupError, match="Not found parameter"):
        get_parameter()


def test_missing_default_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yml"):
        get_parameter(default=str(tmp_path / "nope.yml"))


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = tmp_path / "parameter.yml"
    path.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ValueError, match=r"parameter.yml: line \d+ column \d+ invalid YAML"):
        get_parameter(default=str(path))


def test_yaml_that_is_not_a_mapping(tmp_path):
    path = tmp_path / "parameter.yml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="must be a mapping"):
        get_parameter(default=str(path))


def test_empty_yaml_is_empty_parameters(tmp_path):
    path = tmp_path / "parameter.yml"
    path.write_text("")
    assert get_parameter(default=str(path)) == {}


def test_job_parameters_from_environment(job, parameter_yml):
    p = get_parameter(default=str(parameter_yml))
    assert p.lr == 0.1
    assert p.net.depth == 18
    assert not hasattr(p, "KEY1")


def test_job_parameter_invalid_json(job, monkeypatch):
    monkeypatch.setenv("KPL_ENV_PARAMETER", '{"lr": 0.1,')
    with pytest.raises(ValueError, match="KPL_ENV_PARAMETER is not valid JSON: .* line 1 column"):
        get_parameter()


def test_job_parameter_not_an_object(job, monkeypatch):
    monkeypatch.setenv("KPL_ENV_PARAMETER", "[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        get_parameter()


def test_job_parameter_file_when_no_json(job, monkeypatch, tmp_path):
    path = tmp_path / "job-parameter.yml"
    path.write_text("epochs: 3\n")
    monkeypatch.delenv("KPL_ENV_PARAMETER")
    monkeypatch.setenv("KPL_PARAMETER_FILE", str(path))
    assert get_parameter(default="ignored.yml").epochs == 3


def test_notebook_uses_the_default(job, monkeypatch, parameter_yml):
    monkeypatch.setenv("KPL_ENV", "notebook")
    assert get_parameter(default=str(parameter_yml)).KEY1.KEY2 == "VALUE"


def test_missing_attribute_is_key_and_attribute_error_naming_key():
    p = DotDict({"a": 1})
    assert not hasattr(p, "b")
    with pytest.raises(AttributeError, match="'b'"):
        _ = p.b
    with pytest.raises(KeyError, match="'b'"):  # what the original raised
        _ = p.b
    with pytest.raises(AttributeError, match="'b'"):
        del p.b


def test_attribute_writes_are_items_and_nested_dicts_wrap():
    p = DotDict()
    p.opt = {"name": "sgd", "steps": [{"at": 10}]}
    p.update(extra={"x": 1})
    p.setdefault("more", {"y": 2})
    assert p.opt.name == "sgd"
    assert p.opt.steps[0].at == 10
    assert p.extra.x == 1
    assert p.more.y == 2
    del p.opt
    assert "opt" not in p
    assert p.__dict__ == {}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_round_trip(parameter_yml, protocol):
    p = get_parameter(default=str(parameter_yml))
    back = pickle.loads(pickle.dumps(p, protocol=protocol))
    assert back == p
    assert type(back) is DotDict
    assert back.KEY1.KEY2 == "VALUE"
    assert back.layers[1][0].name == "inner"


def test_deepcopy_and_json(parameter_yml):
    p = get_parameter(default=str(parameter_yml))
    clone = copy.deepcopy(p)
    clone.KEY1.KEY2 = "changed"
    assert p.KEY1.KEY2 == "VALUE"
    assert json.loads(json.dumps(p))["KEY1"]["KEY2"] == "VALUE"


def test_write_parameter_inside_a_job(job, tmp_path):
    out = tmp_path / "sub" / "out.yml"
    write_parameter_file(str(out))
    assert yaml.safe_load(out.read_text()) == {"lr": 0.1, "net": {"depth": 18}}
    assert [p.name for p in out.parent.iterdir()] == ["out.yml"]  # no temporary file left


def test_write_parameter_outside_writes_empty(tmp_path):
    out = tmp_path / "out.yml"
    write_parameter_file(str(out))
    assert yaml.safe_load(out.read_text()) == {}


def test_write_parameter_from_argv_like_the_original(job, tmp_path, monkeypatch):
    out = tmp_path / "argv.yml"
    monkeypatch.setattr(sys, "argv", ["helper", "write", str(out)])
    write_parameter()
    assert yaml.safe_load(out.read_text())["net"]["depth"] == 18


def test_write_parameter_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["helper"])
    with pytest.raises(SystemExit) as exit_info:
        write_parameter()
    assert exit_info.value.code == 1
    assert "Usage `helper write <yml file>`" in capsys.readouterr().out


def test_write_parameter_without_job_parameters(job, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("KPL_ENV_PARAMETER")
    with pytest.raises(LookupError, match="neither KPL_ENV_PARAMETER nor KPL_PARAMETER_FILE"):
        write_parameter_file(str(tmp_path / "out.yml"))
    # write_parameter() logs instead, as the original did.
    monkeypatch.setattr(sys, "argv", ["helper", "write", str(tmp_path / "out.yml")])
    assert write_parameter() is None
    assert "Could get parameters. cannot write parameters" in capsys.readouterr().out
    assert not (tmp_path / "out.yml").exists()


def test_write_parameter_keeps_the_original_signature():
    assert list(inspect.signature(write_parameter).parameters) == []
