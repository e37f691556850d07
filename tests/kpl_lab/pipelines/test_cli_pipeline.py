"""`kpl-lab pipeline …`: new from a template, validate, run (waiting or in the background), runs, show, stop."""

from __future__ import annotations

import json
import time

import pytest

from kpl_lab.cli import main


@pytest.fixture
def cli(lab, capsys):
    """Run `kpl-lab --home HOME --project p ARGS…`; return (exit status, stdout, stderr)."""

    def run(*args):
        status = main(["--home", lab.home, "--project", "p", *args])
        out, err = capsys.readouterr()
        return status, out, err

    return run


def test_new_validate_run_runs_show(cli, fruit, tmp_path):
    fruit.add("fruit-segmentation", fruit.files("segmentation", 12))
    file = tmp_path / "seg.kpl-pipeline.yaml"
    assert cli("pipeline", "new", "--template", "segmentation", str(file))[0] == 0
    assert (
        cli("pipeline", "new", "--template", "segmentation", str(file))[0] == 2
    )  # never overwritten silently
    status, out, err = cli("pipeline", "validate", str(file))
    assert status == 0, err
    assert (
        "joined.out (left_join): path: String, contentType: String, content: ByteArray, type: String?, id: String?, mask: ByteArray?"
        in out
    )

    status, out, err = cli("pipeline", "run", str(file), "--wait")
    assert status == 0, out + err
    lines = out.splitlines()
    assert "extract: running" in lines and "save: succeeded - 12 rows" in lines
    run_id = lines[0].removeprefix("pipeline run ")
    assert lines[-1] == f"pipeline run {run_id} succeeded"

    status, out, _ = cli("pipeline", "run", str(file), "--wait")
    assert status == 0 and "joined: cached - 12 rows" in out.splitlines()

    status, out, _ = cli("pipeline", "runs")
    assert status == 0 and run_id in out and "fruit-segmentation" in out
    status, out, _ = cli("pipeline", "show", run_id, "--json")
    shown = json.loads(out)
    assert shown["state"] == "succeeded" and [n["node"] for n in shown["nodes"]][0] == "raw"
    assert {n["node"]: n["rows_out"] for n in shown["nodes"]}["images"] == 12
    status, out, _ = cli("pipeline", "show", run_id)
    assert status == 0 and "renamed" in out and "left_join" in out


def test_validate_prints_each_problem_with_file_and_line(cli, fruit, tmp_path):
    fruit.add("fruit-segmentation", fruit.files("segmentation", 4))
    file = tmp_path / "bad.kpl-pipeline.yaml"
    cli("pipeline", "new", "--template", "segmentation", str(file))
    file.write_text(file.read_text().replace("on: id", "on: ident"))
    status, _, err = cli("pipeline", "validate", str(file))
    assert status == 1
    assert f'{file}:11: joined.on: field "ident" is not in left input "images"' in err
    status, _, err = cli("pipeline", "run", str(file), "--wait")
    assert status == 2 and "the pipeline has problems" in err


def test_a_failing_node_makes_the_run_exit_nonzero(cli, fruit, tmp_path):
    files = fruit.files("detection", 8)
    files.append(
        {"path": "Fruit/Annotations/broken.xml", "contentType": "application/xml", "content": b"<annotation"}
    )
    fruit.add("fruit-detection", files)
    file = tmp_path / "det.kpl-pipeline.yaml"
    cli("pipeline", "new", "--template", "detection", str(file))
    file.write_text(
        "\n".join(
            line
            for line in file.read_text().splitlines()
            if not line.lstrip().startswith(("train:", "model:"))
        )
    )
    status, out, _ = cli("pipeline", "run", str(file), "--wait")
    assert status == 1
    assert "boxes: failed" in out and "joined: skipped" in out and "annotations: succeeded" in out
    assert "images: skipped" in out  # fused into joined's query, which never ran
    assert out.splitlines()[-1].endswith("failed: failed nodes: boxes")


def test_run_in_the_background_then_show(cli, fruit, tmp_path):
    fruit.add("fruit-segmentation", fruit.files("segmentation", 6))
    file = tmp_path / "seg.kpl-pipeline.yaml"
    cli("pipeline", "new", "--template", "segmentation", str(file))
    status, out, _ = cli("pipeline", "run", str(file))
    assert status == 0
    run_id = out.splitlines()[0].removeprefix("pipeline run ")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        shown = json.loads(cli("pipeline", "show", run_id, "--json")[1])
        if shown["state"] != "running":
            break
        time.sleep(0.2)
    assert shown["state"] == "succeeded"
    assert cli("pipeline", "stop", run_id)[0] == 2  # already finished
