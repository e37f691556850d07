"""kpl_lab.client against a real `jupyter server` running the KPL Lab extension."""

from __future__ import annotations

import io
import socket
import zipfile

import pytest
from PIL import Image

from kpl_lab.client import Client, discover
from kpl_lab.errors import BadRequest, Conflict, Forbidden, KPLError, NotFound


@pytest.fixture
def bare_env(monkeypatch, tmp_path):
    """No KPL/JupyterHub variables, no parent server, an empty runtime folder."""
    for name in (
        "KPL_API_URL",
        "KPL_API_TOKEN",
        "JPY_PARENT_PID",
        "JUPYTERHUB_SERVICE_URL",
        "JUPYTERHUB_API_TOKEN",
        "KPL_SERVICE_URL",
        "KPL_PROJECT",
    ):
        monkeypatch.delenv(name, raising=False)
    empty = tmp_path / "runtime"
    empty.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(empty))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_discovers_the_api_from_kpl_variables(kpl_server, bare_env):
    bare_env.setenv("KPL_API_URL", kpl_server.url)  # a server URL is completed with kpl/api/
    bare_env.setenv("KPL_API_TOKEN", kpl_server.token)
    client = Client()
    assert client.url == kpl_server.url + "kpl/api/"
    assert client.version()["name"] == "kpl-lab"


def test_discovers_the_server_that_started_the_kernel(kpl_server, bare_env):
    bare_env.setenv("JUPYTER_RUNTIME_DIR", str(kpl_server.runtime_dir))
    bare_env.setenv("JPY_PARENT_PID", str(kpl_server.pid))
    assert discover() == (kpl_server.url + "kpl/api/", kpl_server.token)
    assert Client().version()["name"] == "kpl-lab"


def test_discovers_the_server_whose_root_holds_the_working_folder(kpl_server, bare_env):
    bare_env.setenv("JUPYTER_RUNTIME_DIR", str(kpl_server.runtime_dir))
    notebooks = kpl_server.root / "notebooks"
    notebooks.mkdir(exist_ok=True)
    bare_env.chdir(notebooks)
    assert discover() == (kpl_server.url + "kpl/api/", kpl_server.token)


def test_discovers_a_jupyterhub_single_user_server(kpl_server, bare_env):
    bare_env.setenv("JUPYTERHUB_SERVICE_URL", kpl_server.url)
    bare_env.setenv("JUPYTERHUB_API_TOKEN", kpl_server.token)
    assert Client().version()["name"] == "kpl-lab"


def test_says_how_to_fix_finding_no_server(bare_env):
    with pytest.raises(KPLError, match="no KPL Lab server found.*KPL_API_URL"):
        Client()


def test_a_wrong_token_is_forbidden(kpl_server):
    with pytest.raises(Forbidden):
        Client(kpl_server.url, "not-the-token").datasets()


def test_an_unreachable_server_is_named(kpl_server):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(KPLError, match=f"cannot reach the KPL Lab API at http://127.0.0.1:{port}/kpl/api/"):
        Client(f"http://127.0.0.1:{port}", "x").version()


def test_dataset_upload_list_show_records_fields_stats(kpl_server, kpl_data):
    client = kpl_server.client()
    sent = kpl_data.upload_progress
    assert (
        sent
        and sent[-1][0] == sent[-1][1]
        and all(a <= b for (a, _), (b, _) in zip(sent, sent[1:], strict=False))
    )
    assert kpl_data.dataset["name"] == "shapes" and kpl_data.dataset["record_count"] == 6

    names = [d["name"] for d in client.datasets()]
    assert "shapes" in names
    assert [d["name"] for d in client.datasets(q="coloured")] == ["shapes"]
    assert client.datasets(q="no-such-words") == []
    detail = client.dataset_version("shapes")  # the newest version
    assert detail["version"] == kpl_data.dataset["version"] and detail["record_count"] == 6

    first = client.records("shapes", offset=0, limit=4, columns=["path", "contentType"])
    assert first["total"] == 6 and [r["index"] for r in first["records"]] == [0, 1, 2, 3]
    assert set(first["records"][0]["fields"]) == {"path", "contentType"}
    rest = client.records("shapes", detail["version"], offset=4, limit=4)
    assert [r["index"] for r in rest["records"]] == [4, 5]

    page = client.records("shapes", limit=10)["records"]
    by_path = {r["fields"]["path"]: r for r in page}
    image = by_path["images/2.png"]
    ref = image["fields"]["content"]
    assert ref["$bytes"] == len(kpl_data.images["images/2.png"]) and ref["contentType"] == "image/png"
    content, kind = client.field("shapes", None, image["index"], "content")
    assert content == kpl_data.images["images/2.png"] and kind.startswith("image/png")
    small, kind = client.field("shapes", None, image["index"], "content", thumbnail=16)
    assert kind.startswith("image/png")
    with Image.open(io.BytesIO(small)) as thumb:
        assert max(thumb.size) <= 16 and thumb.getpixel((0, 0))[:3] == (0, 0, 255)

    stats = client.dataset_stats("shapes")
    assert stats["records"] == 6 and "path" in stats["fields"]


def test_errors_carry_the_server_message_and_field(kpl_server, kpl_data, tmp_path):
    client = kpl_server.client()
    with pytest.raises(NotFound, match="no-such-dataset"):
        client.dataset("no-such-dataset")
    with pytest.raises(NotFound):
        client.dataset_version("no-such-dataset")
    with pytest.raises(NotFound):
        client.records("shapes", offset=0, limit=5, part="no-such-part")
    with pytest.raises(BadRequest) as failure:
        client.submit("toy", inputs={"nope": "shapes"})
    assert failure.value.field == "inputs.nope" and "no such input" in failure.value.message
    with pytest.raises(BadRequest) as failure:
        client.submit("toy", inputs={"data": "shapes"}, parameters={"no_such_parameter": 1})
    assert failure.value.field == "parameters.no_such_parameter"
    assert [field for field, _ in failure.value.errors] == ["parameters.no_such_parameter"]

    hostile = tmp_path / "hostile.zip"
    with zipfile.ZipFile(hostile, "w") as archive:
        archive.writestr("../escape.txt", b"outside")
    with pytest.raises(BadRequest, match="escape.txt"):
        client.upload_dataset(hostile, "hostile")
    with pytest.raises(NotFound):
        client.dataset("hostile")


def test_algorithm_upload_and_show(kpl_server, kpl_data):
    client = kpl_server.client()
    assert kpl_data.algorithm["name"] == "toy"
    assert "toy" in [a["name"] for a in client.algorithms()]
    detail = client.algorithm_version("toy")
    assert detail["parameters"] == {"steps": 3, "pause": 0.0, "lr": 0.1}
    assert set(detail["functions"]) == {"train", "infer"}
    assert client.algorithm("toy")["versions"][0]["ref"] == detail["ref"]


def test_job_submit_logs_metrics_progress(kpl_server, kpl_data, wait_job_end):
    client = kpl_server.client()
    job = client.submit("toy", inputs={"data": "shapes"}, parameters={"steps": 4, "lr": 0.5})
    assert job["state"] in ("queued", "running") and job["parameters"]["lr"] == 0.5
    followed = "".join(client.follow_logs(job["id"]))
    assert "lr 0.5" in followed and "step 3" in followed
    done = wait_job_end(client, job["id"])
    assert done["state"] == "succeeded", done
    assert done["outputs"]["model"]["registered"].startswith("model:toy-model:")
    assert any(j["id"] == job["id"] for j in client.jobs(state="succeeded"))

    chunk = client.logs(job["id"], offset=0, limit=10)
    assert len(chunk["text"].encode()) <= 10 and chunk["next_offset"] == 10
    assert client.progress(job["id"]) == {
        "state": "succeeded",
        "progress": 1.0,
        "eta_seconds": 0.0,
        "queue": None,
    }
    metrics = client.metrics(job["id"])
    training = metrics["figures"]["training"]
    assert training["loss"] == [[0.0, 1.0], [1.0, 0.5], [2.0, 1 / 3], [3.0, 0.25]]
    assert [x for x, _ in training["accuracy"]] == [0.0, 1.0, 2.0, 3.0]
    assert metrics["labels"]["training"]["y1_name"] == "loss"

    with pytest.raises(Conflict):
        client.stop(job["id"])
    # not the newest: other tests train too
    version = done["outputs"]["model"]["registered"].rsplit(":", 1)[1]
    model = client.model_version("toy-model", version)
    assert model["lineage"]["job_id"] == job["id"]


def test_stop_a_running_job(kpl_server, kpl_data, wait_job_end):
    client = kpl_server.client()
    job = client.submit("toy", inputs={"data": "shapes"}, parameters={"steps": 1000, "pause": 0.2})
    stopped = client.stop(job["id"])
    assert stopped["id"] == job["id"]
    assert wait_job_end(client, job["id"])["state"] == "stopped"


def test_project_is_sent_with_every_request(kpl_server, kpl_data):
    client = Client(kpl_server.url, kpl_server.token, project="no-such-project")
    with pytest.raises((NotFound, Forbidden)):
        client.dataset("shapes")


def test_devices_answer_the_inventory(kpl_server):
    devices = kpl_server.client().devices()
    assert devices["capacity"]["cpu"] > 0 and devices["capacity"]["memory"] > 0
    assert set(devices) >= {"capacity", "used", "project_used", "quota", "devices"}
    assert isinstance(devices["devices"], list)
