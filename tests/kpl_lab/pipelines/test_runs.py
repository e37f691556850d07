"""Runs: cache hit, miss and recompute; parallel branches; re-run from a node; stop; history."""

from __future__ import annotations

import shutil
import threading

import pytest

from kpl_lab.pipelines import processors
from kpl_lab.pipelines.runner import PipelineRunner
from kpl_lab.pipelines.templates import template_text


def _states(run) -> dict[str, str]:
    return {n.node: n.state for n in run.nodes}


@pytest.fixture
def seg(fruit):
    fruit.add("fruit-segmentation", fruit.files("segmentation", 20))
    return template_text("segmentation")


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
    third = runner.run("p", changed)
    assert _states(third) == {
        "raw": "succeeded",
        **dict.fromkeys(["extract", "images", "masks"], "cached"),
        **dict.fromkeys(["renamed", "joined", "save"], "succeeded"),
    }
    assert [r["mask_png"] for r in fruit.saved("fruit-segmentation-train")] == [r["mask"] for r in expected]


def test_a_deleted_cached_output_is_recomputed_not_reused(lab, fruit, seg):
    runner = PipelineRunner(lab)
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


def test_a_deleted_saved_dataset_is_saved_again(lab, fruit, seg):
    runner = PipelineRunner(lab)
    runner.run("p", seg)
    lab.catalog.delete_dataset("p", "fruit-segmentation-train")
    again = runner.run("p", seg)
    assert _states(again)["save"] == "succeeded" and _states(again)["joined"] == "cached"
    assert len(fruit.saved("fruit-segmentation-train")) == 20


def test_independent_branches_run_at_the_same_time(lab, fruit, seg, monkeypatch):
    both = threading.Barrier(2, timeout=60)  # only passes when the two selects run together
    select = processors.PROCESSORS["select"]

    def meet_then_select(*args):
        both.wait()
        select(*args)

    monkeypatch.setitem(processors.PROCESSORS, "select", meet_then_select)
    run = PipelineRunner(lab).run("p", seg)
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    nodes = {n.node: n for n in run.nodes}
    assert (
        nodes["images"].started < nodes["masks"].finished
        and nodes["masks"].started < nodes["images"].finished
    )


def test_rerun_from_a_node_and_rerun_all(lab, fruit, seg):
    runner = PipelineRunner(lab)
    first = runner.run("p", seg)
    from_masks = runner.execute("p", runner.rerun("p", first.id, from_node="masks"))
    assert _states(from_masks) == {
        "raw": "succeeded",
        **dict.fromkeys(["extract", "images"], "cached"),
        **dict.fromkeys(["masks", "renamed", "joined", "save"], "succeeded"),
    }
    fresh = runner.execute("p", runner.rerun("p", first.id, fresh=True))
    assert set(_states(fresh).values()) == {"succeeded"}


def test_stop_ends_the_running_node_and_skips_the_rest(lab, fruit, seg, monkeypatch):
    runner = PipelineRunner(lab)
    started = threading.Event()
    rename = processors.PROCESSORS["rename"]

    def slow_rename(p, inputs, sinks, settings, log):
        started.set()
        while not sinks["out"].stop.wait(0.05):
            pass
        rename(p, inputs, sinks, settings, log)

    monkeypatch.setitem(processors.PROCESSORS, "rename", slow_rename)
    run_id = runner.create("p", seg)
    stopper = threading.Thread(target=lambda: (started.wait(60), runner.stop("p", run_id)))
    stopper.start()
    run = runner.execute("p", run_id)
    stopper.join()
    assert run.state == "stopped"
    states = _states(run)
    assert states["renamed"] == "stopped"
    assert states["joined"] == states["save"] == "stopped"
    assert not list((lab.storage.root / "pipelines" / "p" / "cache" / ".staging").iterdir())


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

    lab.config = Config({"PipelineRunner": {"workers": 1, "memory_limit": "64MB"}})
    runner = PipelineRunner(lab)
    assert (runner.workers, runner.settings.memory_limit) == (1, "64MB")
    assert runner.settings.temp_directory == str(lab.storage.root / "pipelines" / ".spill")
    run = runner.run("p", seg)
    assert run.state == "succeeded"
    assert list((lab.storage.root / "pipelines" / ".spill").iterdir()) == []


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


def test_a_run_whose_dataset_went_away_before_it_started_fails_with_the_problem(lab, fruit, seg):
    runner = PipelineRunner(lab)
    run_id = runner.create("p", seg)
    lab.catalog.delete_dataset("p", "fruit-segmentation")
    run = runner.execute("p", run_id)
    assert run.state == "failed" and "raw.dataset: dataset 'fruit-segmentation' not found" in run.reason
