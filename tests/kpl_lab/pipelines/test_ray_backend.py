"""The Ray Data backend: the same output datasets (records, content hashes, catalog versions) as the local one."""

from __future__ import annotations

import gc
import random

import psutil
import pytest
import ray
from traitlets import TraitError

from kpl_dataset import ReadOnlyDataset
from kpl_lab.cli import main
from kpl_lab.pipelines import cache
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.pipelines.templates import template_text

# Ray Data (2.60) replaces a dataset's log file handler without closing it when two datasets
# log at once; the open file is reported when collected. Only those files are let through.
pytestmark = [
    pytest.mark.filterwarnings("ignore:unclosed file.*ray-data-dataset:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in.*ray-data-dataset:pytest.PytestUnraisableExceptionWarning"
    ),
]


@pytest.fixture(scope="module")
def ray_session():
    """Start one local Ray for the module (its start costs seconds, more on a busy machine)."""
    for attempt in range(3):
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:  # the raylet has a fixed 30 s to register; a busy machine can miss it
            for child in psutil.Process().children(recursive=True):
                if child.pid not in before:  # what this attempt started, nothing else
                    child.kill()
                    child.wait(10)
            ray.shutdown()
            if attempt == 2:
                raise
    yield
    ray.shutdown()
    gc.collect()  # Ray Data's leaked log files are reported here, not in a later module


def _outputs(lab, run) -> dict[str, tuple[str, list[dict]]]:
    """Return each processor output of a run: (content hash, records) by NODE.PORT."""
    found = {}
    for node in run.nodes:
        for port, out in (node.outputs or {}).items():
            if out.get("ref") is None:
                folder = lab.storage.absolute(out["path"])
                found[f"{node.node}.{port}"] = (cache.content(folder), list(ReadOnlyDataset(folder)))
    return found


def _logs(run) -> dict[str, str]:
    return {n.node: n.log or "" for n in run.nodes}


def test_detection_flow_gives_the_same_dataset_version_on_ray(lab, fruit, ray_session):
    fruit.add("fruit-detection", fruit.files("detection", 25))
    text = "\n".join(
        line
        for line in template_text("detection").splitlines()
        if not line.lstrip().startswith(("train:", "model:"))
    )
    local = PipelineRunner(lab).run("p", text)
    assert local.state == "succeeded", [(n.node, n.state, n.log) for n in local.nodes]
    expected = _outputs(lab, local)
    saved = lab.catalog.get_dataset("p", "fruit-detection-train")

    on_ray = PipelineRunner(lab, backend="ray").run("p", text, fresh=True)
    assert on_ray.state == "succeeded", [(n.node, n.state, n.log) for n in on_ray.nodes]
    got = _outputs(lab, on_ray)  # on Ray every node is written; locally fused ones are not
    assert {"annotations.out", "boxes.out", "joined.out"} <= expected.keys() <= got.keys()
    assert {port: got[port] for port in expected} == expected
    logs = _logs(on_ray)
    for node in ("extract", "images", "annotations", "boxes"):
        assert "runs as Ray Data operations" in logs[node], logs[node]
    assert "ray: left_join runs as Ray Data operations" in logs["joined"]
    again = lab.catalog.get_dataset("p", "fruit-detection-train")
    assert (again.record_count, again.parts) == (saved.record_count, saved.parts)
    assert cache.content(lab.catalog.path(again)) == cache.content(lab.catalog.path(saved))
    assert any(r["object"] for r in fruit.saved("fruit-detection-train"))


SCALE = r"""
version: 1
name: scale
nodes:
  raw: {type: dataset, dataset: many}
  extract: {type: regex_extract, input: raw, field: path,
            pattern: '^d/(?P<cls>[a-z]+)/(?P<id>[0-9]+)\.(?P<ext>[a-z]+)$'}
  images: {type: select, input: extract, where: "ext = 'jpg'"}
  notes: {type: select, input: extract, where: "ext = 'txt'"}
  renamed: {type: rename, input: notes, fields: {content: note}}
  joined: {type: left_join, left: images, right: renamed, on: id, fields: [note]}
  labels: {type: label_id, input: joined, field: cls, output: cls_id}
  parts: {type: split, input: labels, ratios: {train: 0.7, val: 0.3}, seed: 4}
  some: {type: sample, input: labels, fraction: 0.3, seed: 2}
  mixed: {type: shuffle, input: labels, seed: 6}
  counted: {type: sql, inputs: {t: labels}, query: "SELECT cls, count(*) AS n FROM t GROUP BY cls ORDER BY cls"}
"""


def _many(count: int) -> list[dict]:
    """Return images d/CLS/I.jpg, a note for every third (two for every ninth) and a path matching nothing."""
    rng = random.Random(3)
    classes = ["apple", "kiwi", "orange", "fig", "lime"]
    out = []
    for i in range(count):
        cls = rng.choice(classes)
        out.append({"path": f"d/{cls}/{i}.jpg", "contentType": "image/jpeg", "content": rng.randbytes(4)})
        for n in range((i % 3 == 0) + (i % 9 == 0)):
            out.append(
                {"path": f"d/{cls}/{i}.txt", "contentType": "text/plain", "content": f"{i}-{n}".encode()}
            )
    out.append({"path": "README", "contentType": "text/plain", "content": b"no match"})
    rng.shuffle(out)
    return out


def test_every_processor_gives_the_same_batches_on_ray(lab, fruit, ray_session):
    fruit.add("many", _many(9000))  # ~13,000 records: several blocks of 4096 rows
    local = PipelineRunner(lab).run("p", SCALE)
    assert local.state == "succeeded", [(n.node, n.state, n.log) for n in local.nodes]
    expected = _outputs(lab, local)
    assert len(expected["labels.out"][1]) == 9000 + 1000  # a row per note, one for an image without

    on_ray = PipelineRunner(lab, backend="ray").run("p", SCALE, fresh=True)
    assert on_ray.state == "succeeded", [(n.node, n.state, n.log) for n in on_ray.nodes]
    got = _outputs(lab, on_ray)
    assert (
        {"labels.out", "parts.train", "parts.val", "some.out", "mixed.out"} <= expected.keys() <= got.keys()
    )
    for port, (content, records) in expected.items():
        assert got[port][1] == records, port
        assert got[port][0] == content, port
    logs = _logs(on_ray)
    assert "ray: sql runs in DuckDB on the driver" in logs["counted"]
    assert "ray: label_id runs as Ray Data operations" in logs["labels"]
    assert "5 labels: apple, fig, kiwi, lime, orange" in logs["labels"]


JOINS = r"""
version: 1
name: joins
nodes:
  raw: {type: dataset, dataset: keyed}
  extract: {type: regex_extract, input: raw, field: path, pattern: '^(?P<id>[0-9]+)\.(?P<ext>[a-z]+)$'}
  left: {type: select, input: extract, where: "ext = 'jpg' OR id IS NULL"}
  notes: {type: select, input: extract, where: "ext = 'txt' OR id IS NULL"}
  right: {type: rename, input: notes, fields: {path: note_path, content: note, contentType: kind, ext: note_ext}}
  none: {type: select, input: right, where: "false"}
  nothing: {type: select, input: extract, where: "false"}
  joined: {type: left_join, left: left, right: right, on: id, fields: [note, kind]}
  alone: {type: left_join, left: left, right: none, on: id}
  empty: {type: left_join, left: nothing, right: right, on: id}
  one: {type: select, input: right, where: "id = '5'"}
  single: {type: left_join, left: left, right: one, on: id, fields: [note]}
"""


def test_left_join_keeps_the_local_order_and_null_keys_on_ray(lab, fruit, ray_session):
    rng = random.Random(5)
    records = []
    for i in range(6000):
        records.append({"path": f"{i % 4000}.jpg", "contentType": "image/jpeg", "content": rng.randbytes(3)})
        for n in range(i % 4):  # none, one or several matches, in an order of their own
            records.append({"path": f"{i}.txt", "contentType": "text/plain", "content": f"{i}-{n}".encode()})
        if i % 500 == 0:  # no key on either side: null keys match nothing
            records.append({"path": f"x{i}", "contentType": "text/plain", "content": b"null key"})
    rng.shuffle(records)
    fruit.add("keyed", records)
    local = PipelineRunner(lab).run("p", JOINS)
    assert local.state == "succeeded", [(n.node, n.state, n.log) for n in local.nodes]
    expected = _outputs(lab, local)
    joined = expected["joined.out"][1]
    assert sum(r["id"] is None for r in joined) == 12 and all(
        r["note"] is None for r in joined if r["id"] is None
    )
    assert len({r["id"] for r in joined if r["note"] is not None}) < len(joined)  # duplicates kept

    on_ray = PipelineRunner(lab, backend="ray").run("p", JOINS, fresh=True)
    assert on_ray.state == "succeeded", [
        (n.node, n.state, n.log[-300:]) for n in on_ray.nodes if n.state != "succeeded"
    ]
    got = _outputs(lab, on_ray)
    assert {"joined.out", "alone.out", "empty.out", "single.out"} <= expected.keys() <= got.keys()
    for port, (content, records) in expected.items():
        assert got[port][1] == records, port
        assert got[port][0] == content, port
    for node in ("joined", "alone", "empty", "single"):
        log = _logs(on_ray)[node]
        assert "ray: left_join runs as Ray Data operations" in log and "on the driver" not in log, log


def test_a_bad_annotation_names_its_record_on_ray_as_locally(lab, fruit, ray_session):
    records = [
        {"path": f"a/{i}.xml", "contentType": "application/xml", "content": fruit.voc_xml(str(i), [], (4, 3))}
        for i in range(6)
    ]
    records[4]["content"] = b"<annotation><size>"
    fruit.add("notes", records)
    text = "version: 1\nname: bad\nnodes:\n  raw: {type: dataset, dataset: notes}\n  boxes: {type: parse_voc, input: raw}\n"
    logs = [
        _logs(PipelineRunner(lab, backend=b).run("p", text, fresh=True))["boxes"] for b in ("local", "ray")
    ]
    local_error, ray_error = (log.splitlines()[-1] for log in logs)
    assert "record 4" in local_error and ray_error == local_error


def test_the_cli_runs_on_the_backend_named_and_refuses_a_bad_name(lab, fruit, capsys, tmp_path, ray_session):
    with pytest.raises(
        TraitError, match=r"PipelineRunner.backend: 'spark' is no pipeline backend \(one of local, ray\)"
    ):
        PipelineRunner(lab, backend="spark")
    fruit.add("fruit-segmentation", fruit.files("segmentation", 8))
    file = tmp_path / "seg.kpl-pipeline.yaml"
    file.write_text(template_text("segmentation"))

    def cli(*args: str) -> tuple[int, str, str]:
        status = main(["--home", lab.home, "--project", "p", "pipeline", "run", str(file), "--wait", *args])
        return status, *capsys.readouterr()

    status, out, err = cli("--backend", "spark")
    assert status == 2 and out == ""  # refused before a run is recorded
    assert "--backend: 'spark' is not a pipeline backend (one of local, ray)" in err
    status, out, err = cli("--backend", "ray")
    assert status == 0, out + err
    run = PipelineRunner(lab).get("p", out.splitlines()[0].removeprefix("pipeline run "))
    assert "ray: regex_extract runs as Ray Data operations" in _logs(run)["extract"]
    assert len(fruit.saved("fruit-segmentation-train")) == 8
