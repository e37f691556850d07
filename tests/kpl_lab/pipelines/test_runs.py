"""Runs: cache hit, miss and recompute; parallel branches; re-run from a node; stop; history."""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest

from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.pipelines.templates import template_text
from kpl_lab.pipelines.validate import PlatformCatalog

from .test_sql import stop_when_running


def _states(run) -> dict[str, str]:
    return {n.node: n.state for n in run.nodes}


@pytest.fixture
def seg(fruit):
    fruit.add("fruit-segmentation", fruit.files("segmentation", 20))
    return template_text("segmentation")


def _keep(text: str, *nodes: str) -> str:
    """Return the file with `keep: true` on these nodes (their output written, not fused away)."""
    for node in nodes:
        text = re.sub(rf"^(\s+{node}:\s*){{", r"\1{keep: true, ", text, count=1, flags=re.M)
    return text


def test_unchanged_pipeline_is_cached_and_a_changed_parameter_recomputes_downstream(lab, fruit, seg):
    runner = PipelineRunner(lab)
    first = runner.run("p", seg)
    assert _states(first) == dict.fromkeys(
        ["raw", "extract", "images", "masks", "renamed", "joined", "save"], "succeeded"
    )
    expected = fruit.saved("fruit-segmentation-train")

    second = runner.run("p", seg)
    assert second.state == "succeeded"
    assert _states(second) == {
        "raw": "succeeded",
        **dict.fromkeys(["extract", "images", "masks", "renamed", "joined", "save"], "cached"),
    }
    assert all(n.cached == (n.state == "cached") for n in second.nodes)
    assert {n.node: n.rows_out for n in second.nodes} == {n.node: n.rows_out for n in first.nodes}

    changed = seg.replace("fields: {content: mask}", "fields: {content: mask_png}").replace(
        "fields: [mask]", "fields: [mask_png]"
    )
    third = runner.run("p", changed)  # extract … joined are one query: a change in it runs all of it
    assert _states(third) == {
        "raw": "succeeded",
        **dict.fromkeys(["extract", "images", "masks", "renamed", "joined", "save"], "succeeded"),
    }
    assert [r["mask_png"] for r in fruit.saved("fruit-segmentation-train")] == [r["mask"] for r in expected]
    assert {n.node: n.rows_out for n in third.nodes} == {n.node: n.rows_out for n in first.nodes}

    kept = _keep(seg, "extract")  # written, so it is cached on its own
    runner.run("p", kept)
    fourth = runner.run("p", _keep(changed.replace("mask_png", "mask2"), "extract"))
    assert _states(fourth) == {
        "raw": "succeeded",
        "extract": "cached",
        **dict.fromkeys(["images", "masks", "renamed", "joined", "save"], "succeeded"),
    }


def test_only_outputs_someone_reads_are_written(lab, fruit, seg):
    run = PipelineRunner(lab).run("p", seg)
    nodes = {n.node: n for n in run.nodes}
    assert [n for n in nodes if nodes[n].outputs] == ["raw", "joined", "save"]
    assert all(
        nodes[n].log == "fused into the query of joined (not written; `keep: true` writes it)"
        for n in ("extract", "images", "masks", "renamed")
    )
    rows = {n: (nodes[n].rows_in, nodes[n].rows_out) for n in nodes}
    # 20 images, 15 masks, one README
    assert rows == {
        "raw": (None, 36),
        "extract": (36, 36),
        "images": (36, 20),
        "masks": (36, 15),
        "renamed": (15, 15),
        "joined": (35, 20),
        "save": (20, 20),
    }


def test_a_fused_nodes_records_are_written_when_asked_for_once(lab, fruit, seg):
    runner = PipelineRunner(lab)
    run = runner.run("p", seg)
    shown = runner.records("p", run.id, "images", limit=100)  # its query runs now, into the cache
    assert shown["total"] == 20
    assert [f["name"] for f in shown["fields"]][-2:] == ["type", "id"]
    images = [r["path"] for r in fruit.files("segmentation", 20) if "/JPEGImages/" in r["path"]]
    assert [r["path"] for r in shown["records"]] == images
    assert {r["type"] for r in shown["records"]} == {"JPEGImages"}
    renamed = runner.records("p", run.id, "renamed", limit=3)  # through masks, an unwritten input
    assert renamed["total"] == 15 and len(renamed["records"]) == 3
    assert all(r["type"] == "SegmentationClass" for r in renamed["records"])

    kept = runner.run("p", _keep(seg, "images"))  # written now: the output made on request is reused
    assert _states(kept)["images"] == "cached"


def test_a_deleted_cached_output_is_recomputed_not_reused(lab, fruit, seg):
    runner = PipelineRunner(lab)
    seg = _keep(seg, "extract")
    first = runner.run("p", seg)
    extract = next(n for n in first.nodes if n.node == "extract")
    folder = lab.storage.absolute(extract.outputs["out"]["path"])
    shard = next(p for p in folder.rglob("*.arrow"))
    shard.unlink()
    second = runner.run("p", seg)
    assert second.state == "succeeded"
    assert _states(second)["extract"] == "succeeded"
    assert _states(second)["images"] == "cached"  # same content again downstream
    assert any(folder.rglob("*.arrow"))

    shutil.rmtree(folder.parent)
    third = runner.run("p", seg)
    assert _states(third)["extract"] == "succeeded"

    joined = next(n for n in third.nodes if n.node == "joined")  # a fused query's output
    shutil.rmtree(lab.storage.absolute(joined.outputs["out"]["path"]).parent)
    fourth = runner.run("p", seg)
    assert {n: _states(fourth)[n] for n in ("extract", "images", "joined", "save")} == {
        "extract": "cached",
        "images": "succeeded",
        "joined": "succeeded",
        "save": "cached",  # the same content as before
    }


def test_a_deleted_saved_dataset_is_saved_again(lab, fruit, seg):
    runner = PipelineRunner(lab)
    runner.run("p", seg)
    lab.catalog.delete_dataset("p", "fruit-segmentation-train")
    again = runner.run("p", seg)
    assert _states(again)["save"] == "succeeded" and _states(again)["joined"] == "cached"
    assert len(fruit.saved("fruit-segmentation-train")) == 20


def test_independent_branches_run_at_the_same_time(lab, fruit, seg, monkeypatch):
    both = threading.Barrier(2, timeout=60)  # only passes when the two selects' queries are sent together
    sandboxed = PipelineRunner._sandboxed

    def meet_then_run(self, project, work, *args, what, **kwargs):
        if what in ("node images", "node masks"):
            both.wait()
        return sandboxed(self, project, work, *args, what=what, **kwargs)

    monkeypatch.setattr(PipelineRunner, "_sandboxed", meet_then_run)
    run = PipelineRunner(lab).run("p", _keep(seg, "images", "masks"))
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    nodes = {n.node: n for n in run.nodes}
    assert (
        nodes["images"].started < nodes["masks"].finished
        and nodes["masks"].started < nodes["images"].finished
    )


def test_rerun_from_a_node_and_rerun_all(lab, fruit, seg):
    runner = PipelineRunner(lab)
    first = runner.run("p", _keep(seg, "extract"))
    from_masks = runner.execute("p", runner.rerun("p", first.id, from_node="masks"))
    assert _states(from_masks) == {
        "raw": "succeeded",
        "extract": "cached",
        # images is fused into joined's query, which runs again
        **dict.fromkeys(["images", "masks", "renamed", "joined", "save"], "succeeded"),
    }
    fresh = runner.execute("p", runner.rerun("p", first.id, fresh=True))
    assert set(_states(fresh).values()) == {"succeeded"}


def test_a_fresh_run_of_the_same_data_registers_no_new_version(lab, fruit, seg):
    runner = PipelineRunner(lab)
    first = runner.run("p", seg)
    again = runner.run("p", seg, fresh=True)  # everything written again: new shard names and times
    assert _states(again)["save"] == "succeeded"
    (saved,) = [d for d in lab.catalog.list_datasets("p") if d.name == "fruit-segmentation-train"]
    assert len(saved.versions) == 1 and first.state == "succeeded"


def test_a_split_after_a_query_writes_each_record_once_and_save_dataset_links_it(lab, fruit):
    fruit.add(
        "plain", [{"path": f"{i}.jpg", "contentType": "image/jpeg", "content": b"x"} for i in range(50)]
    )
    text = (
        "version: 1\nname: parts\nnodes:\n  raw: {type: dataset, dataset: plain}\n"
        "  pick: {type: select, input: raw, where: \"path <> '7.jpg'\"}\n"
        "  parts: {type: split, input: pick, ratios: {train: 0.5, val: 0.5}, seed: 3}\n"
        "  train: {type: save_dataset, input: parts.train, name: t}\n"
        "  val: {type: save_dataset, input: parts.val, name: v}\n"
    )
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    cache = lab.storage.project_dir("p") / "pipelines" / "cache"
    # one folder holds the query's one write: the split's two parts, not the select's output
    assert [d for d in cache.iterdir() if (d / "out").exists()] == []
    (written,) = [d for d in cache.iterdir() if (d / "train").is_dir()]
    assert sorted(f.name for f in written.iterdir()) == ["node.json", "train", "val"]
    for name, part in (("t", "train"), ("v", "val")):
        saved = lab.catalog.path(lab.catalog.get_dataset("p", name))
        shards = sorted(f.relative_to(written / part) for f in (written / part).rglob("*.kpl/*"))
        assert shards and all((saved / f).samefile(written / part / f) for f in shards)  # linked, not copied
    assert len(fruit.saved("t")) + len(fruit.saved("v")) == 49


def test_stop_ends_the_running_node_and_skips_the_rest(lab, fruit):
    fruit.add("plain", [{"path": f"{i}.jpg", "contentType": "image/jpeg", "content": b"x"} for i in range(3)])
    slow = "SELECT sum(hash(r1.range + r2.range)) AS n FROM a, range(1000000000) r1, range(1000000000) r2"
    text = (
        "version: 1\nname: slow\nnodes:\n  raw: {type: dataset, dataset: plain}\n"
        f"  pick: {{type: sql, inputs: {{a: raw}}, query: {json.dumps(slow)}}}\n"
        "  save: {type: save_dataset, input: pick, name: counted}\n"
    )
    runner = PipelineRunner(lab)
    run_id = runner.create("p", text)
    stopped: list[float] = []
    stopper = stop_when_running(runner, run_id, "pick", stopped)
    run = runner.execute("p", run_id)
    stopper.join()
    assert run.state == "stopped"
    assert _states(run) == {"raw": "succeeded", "pick": "stopped", "save": "stopped"}
    assert not list((lab.storage.project_dir("p") / ".staging").iterdir())


def test_history_lists_runs_newest_first(lab, fruit, seg):
    runner = PipelineRunner(lab)
    a = runner.run("p", seg)
    b = runner.run("p", seg)
    assert [r.id for r in runner.list("p")] == [b.id, a.id]
    shown = runner.get("p", a.id)
    assert shown.file == seg and shown.name == "fruit-segmentation"
    node = next(n for n in shown.nodes if n.node == "images")
    assert (
        node.started <= node.finished and node.rows_in == 20 + 15 + 1 and node.rows_out == 20
    )  # images, masks, README


def test_runner_settings_come_from_the_platform_config_and_spills_are_removed(lab, fruit, seg):
    from traitlets.config import Config

    lab.config = Config(
        {"PipelineRunner": {"workers": 1, "memory_limit": "64MB", "threads": 2, "query_time_limit": 600}}
    )
    runner = PipelineRunner(lab)
    assert (runner.workers, runner.settings.memory_limit) == (1, "64MB")
    assert (runner.settings.threads, runner.settings.time_limit) == (2, 600)
    assert runner.settings.temp_directory is None  # each query spills beside its output, removed after
    run = runner.run("p", seg)
    assert run.state == "succeeded"
    assert list((lab.storage.project_dir("p") / "pipelines" / "cache").rglob("node-*")) == []


def test_a_run_whose_process_ended_is_marked_failed(lab, fruit, seg):
    import subprocess
    import sys

    from kpl_lab.catalog.pipelines import PipelineRun

    runner = PipelineRunner(lab)
    run_id = runner.create("p", seg)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    with lab.session() as session:
        session.get(PipelineRun, run_id).pid = int(gone.stdout)
    run = runner.get("p", run_id)
    assert run.state == "failed" and f"(pid {int(gone.stdout)}) ended" in run.reason
    assert set(_states(run).values()) == {"skipped"}
    assert [r.state for r in runner.list("p")] == ["failed"]


def test_a_run_whose_dataset_went_away_before_it_started_fails_at_the_node_reading_it(lab, fruit, seg):
    runner = PipelineRunner(lab)
    run_id = runner.create("p", seg)
    lab.catalog.delete_dataset("p", "fruit-segmentation")
    run = runner.execute("p", run_id)  # runs what was checked: the version found then, now gone
    assert run.state == "failed" and run.reason == "failed nodes: raw"
    nodes = {n.node: n for n in run.nodes}
    assert nodes["raw"].log == "dataset 'fruit-segmentation' not found in project 'p'"
    assert {n: nodes[n].state for n in nodes if n != "raw"} == dict.fromkeys(list(nodes)[1:], "skipped")


def test_two_requests_for_a_fused_nodes_records_at_once_agree(lab, fruit, seg):
    runner = PipelineRunner(lab)
    run = runner.run("p", seg)
    answers, errors = [], []

    def ask():
        try:
            answers.append(runner.records("p", run.id, "masks", limit=20))
        except Exception as err:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(err)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(answers) == 3 and answers[0]["total"] == 15
    assert answers[1] == answers[0] and answers[2] == answers[0]


def test_a_run_is_checked_once_when_recorded_and_runs_what_was_checked(lab, fruit, seg, monkeypatch):
    from kpl_lab import documents
    from kpl_lab.pipelines.nodes import NODE_TYPES

    parsed, checked, sessions = [], [], []
    compose = documents.compose_yaml
    monkeypatch.setattr(documents, "compose_yaml", lambda text, *a: parsed.append(text) or compose(text, *a))
    for node_type in NODE_TYPES.values():  # every check goes through the registry's node types
        check = node_type.check
        monkeypatch.setattr(node_type, "check", lambda p, *a, check=check: checked.append(p) or check(p, *a))
    worker = PlatformCatalog.checks  # the sandboxed worker session a validation's SQL checks run in
    monkeypatch.setattr(PlatformCatalog, "checks", lambda self: sessions.append(self) or worker(self))

    run_id = PipelineRunner(lab).create("p", seg)
    once = (parsed.count(seg), len(checked), len(sessions))
    assert once == (1, 7, 1)
    run = PipelineRunner(lab).execute("p", run_id)  # as a process of its own does: from the run's record
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    shown = PipelineRunner(lab).records("p", run_id, "images")  # a fused node's query runs now
    assert shown["total"] == 20
    assert (parsed.count(seg), len(checked), len(sessions)) == once


def test_a_run_reads_the_dataset_version_it_was_checked_with(lab, fruit, seg):
    runner = PipelineRunner(lab)
    run_id = runner.create("p", seg)
    version = lab.catalog.get_dataset("p", "fruit-segmentation").ref
    fruit.add("fruit-segmentation", fruit.files("segmentation", 6))  # a newer version before it starts
    run = runner.execute("p", run_id)
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    raw = next(n for n in run.nodes if n.node == "raw")
    assert raw.outputs["out"]["ref"] == f"dataset:{version}"
    assert len(fruit.saved("fruit-segmentation-train")) == 20  # not the newer version's 6 images
