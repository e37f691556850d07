"""Dataset imports run on their own workers: excess ones are listed as queued, a full queue answers 503."""

from __future__ import annotations

import asyncio
import threading

import pytest
from tornado.httpclient import HTTPClientError

from kpl_lab.catalog.service import Catalog

from .conftest import imagefolder_zip


@pytest.fixture
def jp_server_config(jp_server_config):
    """One import worker and room for one waiting import."""
    jp_server_config["KPLLab"] |= {"import_workers": 1, "import_queue": 1}
    return jp_server_config


@pytest.fixture
def gate(monkeypatch):
    """Hold every import until the test opens the gate."""
    opened = threading.Event()
    real = Catalog.import_dataset

    def held(*args, **kwargs):
        opened.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(Catalog, "import_dataset", held)
    yield opened
    opened.set()


async def imports_when(api, wanted, **params) -> list[dict]:
    """Poll GET imports until the (dataset, state) pairs are the wanted ones."""
    for _ in range(200):
        code, body = await api.get("imports", **params)
        assert code == 200, body
        if [(i["dataset"], i["state"]) for i in body["imports"]] == wanted:
            return body["imports"]
        await asyncio.sleep(0.05)
    raise AssertionError(f"imports never became {wanted}: {body}")


async def test_excess_imports_wait_queued_and_a_full_queue_answers_503(api, gate):
    upload = imagefolder_zip()
    first = asyncio.ensure_future(api.upload("datasets", upload, name="first", format="imagefolder"))
    await imports_when(api, [("first", "importing")])
    second = asyncio.ensure_future(
        api.upload("datasets", upload, name="second", format="imagefolder", filename="second.zip")
    )
    running, waiting = await imports_when(api, [("first", "importing"), ("second", "queued")])
    assert running["started_at"] and running["ahead"] == 0
    assert waiting == waiting | {
        "filename": "second.zip",
        "format": "imagefolder",
        "started_at": None,
        "ahead": 0,
    }

    code, body = await api.upload("datasets", upload, name="third", format="imagefolder")
    assert (code, body["error"]) == (503, "Unavailable") and "waiting" in body["message"]
    # catalog queries are served while the import worker is busy, and other projects see nothing
    assert (await api.get("datasets"))[0] == 200
    assert (await api.get("imports", project="other")) == (200, {"imports": []})

    gate.set()
    (code, one), (code_two, two) = await asyncio.gather(first, second)
    assert (code, one["name"], code_two, two["name"]) == (201, "first", 201, "second")
    assert (await api.get("imports")) == (200, {"imports": []})
    assert sorted(d["name"] for d in (await api.get("datasets"))[1]["datasets"]) == ["first", "second"]


async def test_failed_import_leaves_the_list_and_answers_the_error(api, gate):
    gate.set()
    code, body = await api.upload("datasets", b"PK\x03\x04 cut short", name="broken", filename="broken.zip")
    assert code == 400 and "broken.zip: damaged zip archive" in body["message"]
    assert (await api.get("imports")) == (200, {"imports": []})


async def test_import_whose_client_leaves_while_queued_is_dropped(api, gate):
    upload = imagefolder_zip()
    first = asyncio.ensure_future(api.upload("datasets", upload, name="first", format="imagefolder"))
    await imports_when(api, [("first", "importing")])
    leaving = asyncio.ensure_future(
        api.fetch(
            "kpl",
            "api",
            "datasets",
            method="POST",
            body=upload,
            params={"name": "leaving", "format": "imagefolder"},
            request_timeout=2,
        )
    )
    await imports_when(api, [("first", "importing"), ("leaving", "queued")])
    with pytest.raises(HTTPClientError, match="Timeout"):  # the client gives up
        await leaving
    await imports_when(api, [("first", "importing")])
    gate.set()
    assert (await first)[0] == 201
    assert [d["name"] for d in (await api.get("datasets"))[1]["datasets"]] == ["first"]
