"""Annotation through the REST API: `Client` against a real server, and `kpl-lab annotation` through the
service and on the server's own home answering alike."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

import pytest

from kpl_lab.cli import main
from kpl_lab.client import Client
from kpl_lab.errors import BadRequest, Conflict, NotFound

from .conftest import _png, _zip

PROJECT = "labels"


@pytest.fixture(scope="module")
def client(kpl_server, tmp_path_factory) -> Client:
    """Return a client of project `labels`, which holds dataset `squares` (4 PNG images)."""
    client = Client(kpl_server.url, kpl_server.token, project=PROJECT)
    base = tmp_path_factory.mktemp("annotation")
    squares = {
        f"sq/{i}.png": _png(colour)
        for i, colour in enumerate([(250, 0, 0), (0, 250, 0), (0, 0, 250), (250, 0, 0)])
    }
    client.upload_dataset(_zip(base / "squares.zip", squares), "squares")
    return client


@pytest.fixture
def task(client):
    client.create_annotation_task(
        "colour", "squares", "image_class", [{"name": "red", "children": ["dark"]}, "green", "blue"]
    )
    yield "colour"
    client.delete_annotation_task("colour")


def test_a_task_is_labelled_reviewed_and_shown_through_the_client(client, task):
    assert [t["name"] for t in client.annotation_tasks()] == ["colour"]
    assert client.project_members() is None  # a single-user server keeps no directory of users
    record = client.annotation_record(task, 1)
    assert record["fields"]["path"] == "sq/1.png" and record["label"] is None
    path, _, query = record["fields"]["content"]["url"].split("/kpl/api/", 1)[1].partition("?")
    image, kind = client.raw(path, dict(parse_qsl(query)))
    assert kind == "image/png" and image.startswith(b"\x89PNG")
    saved = client.save_label(task, 1, {"class_name": "green"}, 0)
    assert saved["version"] == 1 and saved["state"] == "labelled"
    with pytest.raises(Conflict, match="record 1: .* saved it at .*version 1"):
        client.save_label(task, 1, {"class_name": "blue"}, 0)
    with pytest.raises(BadRequest, match="'pink' is not a class") as refused:
        client.save_label(task, 2, {"class_name": "pink"}, 0)
    assert refused.value.field == "value.class_name"
    assert client.review_label(task, 1, "accept", 1)["state"] == "accepted"
    assert [e["action"] for e in client.label_history(task, 1)] == ["saved", "accepted"]
    page = client.annotation_queue(task, limit=2)
    assert [e["record"] for e in page["records"]] == [0, 2] and page["next"] == "2"
    assert [e["record"] for e in client.annotation_queue(task, after=page["next"])["records"]] == [3]
    progress = client.annotation_task(task)["progress"]
    assert (progress["labelled"], progress["accepted"], progress["percent"]) == (1, 1, 25.0)
    changed = client.update_annotation_task(task, description="colours of squares", reviewers=["rev"])
    assert changed["description"] == "colours of squares" and changed["reviewers"] == ["rev"]
    with pytest.raises(NotFound, match="record 4 not found"):
        client.annotation_record(task, 4)


def test_the_cli_answers_alike_through_the_service_and_here(kpl_server, client, task, monkeypatch, capsys):
    for name in ("KPL_API_URL", "KPL_API_TOKEN", "KPL_PROJECT", "KPL_LAB_HOME"):
        monkeypatch.delenv(name, raising=False)

    def run(*args: str, service: bool = True) -> tuple[int, str, str]:
        if service:
            monkeypatch.setenv("KPL_SERVICE_URL", kpl_server.url + "kpl/")
            monkeypatch.setenv("JUPYTERHUB_API_TOKEN", kpl_server.token)
            status = main(["--project", PROJECT, "annotation", *args])
        else:
            monkeypatch.delenv("KPL_SERVICE_URL", raising=False)
            monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
            status = main(["--home", str(kpl_server.home), "--project", PROJECT, "annotation", *args])
        out, err = capsys.readouterr()
        return status, out, err

    status, out, err = run("label", task, "2", "--class", "red", "--subclass", "dark")
    assert status == 0, err
    assert out.startswith("record 2: labelled, version 1, by ")
    status, out, err = run("label", task, "3", "--class", "blue", service=False)
    assert status == 0, err
    status, _, err = run("label", task, "3", "--class", "green", "--version", "0")
    assert status == 2 and "record 3:" in err and "saved it at" in err
    status, _, err = run("review", task, "3", "reject")
    assert status == 2 and "say what is wrong" in err
    assert run("review", task, "3", "reject", "--comment", "it is red")[0] == 0
    for args in (("list",), ("show", task), ("queue", task, "--state", "all"), ("history", task, "3")):
        status, remote, err = run(*args)
        assert status == 0, err
        assert remote == run(*args, service=False)[1]
        assert json.loads(run(*args, "--json")[1]) == json.loads(run(*args, "--json", service=False)[1])
    status, out, _ = run("history", task, "3")
    assert [line.split()[:2] for line in out.splitlines()[2:]] == [["1", "saved"], ["2", "rejected"]]
    status, out, _ = run("show", task)
    assert "2/4 labelled (50.0%)" in out and "0 accepted" in out and "1 rejected" in out
    status, _, err = run("create", "bad", "--dataset", "squares", "--kind", "image_class")
    assert status == 2 and "--class" in err


def test_a_project_sees_none_of_another_projects_tasks(kpl_server, client, task):
    other = Client(kpl_server.url, kpl_server.token, project="elsewhere")
    assert other.annotation_tasks() == []
    with pytest.raises(NotFound, match="annotation task 'colour' not found in project 'elsewhere'"):
        other.annotation_task(task)
    with pytest.raises(NotFound):
        other.save_label(task, 0, {"class_name": "red"}, 0)
    with pytest.raises(NotFound):
        other.annotation_record(task, 0)
    with pytest.raises(NotFound):
        other.delete_annotation_task(task)
    with pytest.raises(NotFound):  # nor its dataset: a task names datasets of its own project only
        other.create_annotation_task("colour", "squares", "image_class", ["red"])
    assert client.annotation_task(task)["name"] == "colour"


def test_accepted_labels_are_published_exported_and_imported(
    kpl_server, client, tmp_path, monkeypatch, capsys
):
    client.create_annotation_task("boxes", "squares", "boxes", ["red", "green"])
    client.create_annotation_task("boxes-copy", "squares", "boxes", ["red", "green"])
    try:
        box = {"type": "box", "class_name": "red", "xmin": 1, "ymin": 1, "xmax": 5, "ymax": 6}
        for record in (0, 3):
            saved = client.save_label("boxes", record, {"objects": [box]}, 0)
            client.review_label("boxes", record, "accept", saved["version"])
        version = client.publish_annotation("boxes", "squares-boxes", test_fraction=0.5)
        assert (
            version["parts"] == {"train": 1, "test": 1} and version["lineage"]["annotation_task"] == "boxes"
        )
        with pytest.raises(BadRequest, match="format: 'pascal' is not one of") as refused:
            client.export_annotation("boxes", "pascal", tmp_path / "x.zip")
        assert refused.value.field == "format"
        exported = client.export_annotation("boxes", "voc", tmp_path / "boxes-voc.zip")
        done = client.import_annotation("boxes-copy", "voc", exported)
        assert (done["found"], done["imported"], done["kept"]) == (2, 2, 0)
        assert client.annotation_record("boxes-copy", 3)["label"]["value"]["objects"][0]["xmax"] == 5

        # the CLI does the same here, on the server's home, as through the service
        for name in ("KPL_API_URL", "KPL_API_TOKEN", "KPL_PROJECT", "KPL_LAB_HOME", "KPL_SERVICE_URL"):
            monkeypatch.delenv(name, raising=False)
        home = ["--home", str(kpl_server.home), "--project", PROJECT, "annotation"]
        output = tmp_path / "here.zip"
        assert main([*home, "export", "boxes", "--format", "coco", "-o", str(output)]) == 0
        assert capsys.readouterr().out == f"wrote {output}\n"
        client.delete_annotation_task("boxes-copy")
        client.create_annotation_task("boxes-copy", "squares", "boxes", ["red", "green"])
        assert main([*home, "import", "boxes-copy", str(output), "--format", "coco"]) == 0
        assert capsys.readouterr().out.startswith("2 records labelled from 2 labelled images; 0 kept")
        assert main([*home, "publish", "boxes", "--dataset", "squares-boxes", "--test-fraction", "0"]) == 0
        assert "records (train 2)" in capsys.readouterr().out
    finally:
        client.delete_annotation_task("boxes")
        client.delete_annotation_task("boxes-copy")
