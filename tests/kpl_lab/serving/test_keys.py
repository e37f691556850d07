"""API keys of deployments: kept hashed, listed without the key, revoked; a key opens its deployment's predict only."""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request

import pytest
from sqlalchemy import select
from traitlets.config import Config

from kpl_lab.catalog.deployments import DeploymentKey
from kpl_lab.cli import main
from kpl_lab.errors import NotFound
from kpl_lab.platform import Platform

from .conftest import toy_algorithm

WAIT = 120.0


def test_keys_are_kept_hashed_listed_and_revoked(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    row, key = service.keys.create("default", "pets", "ann")
    assert key.startswith("kpldk_") and len(key) > 40
    with serving_platform.session() as session:
        kept = session.scalars(select(DeploymentKey)).one()
        assert kept.digest == hashlib.sha256(key.encode()).hexdigest() and key not in {
            kept.prefix,
            kept.digest,
        }
    assert key.startswith(row.prefix) and len(row.prefix) < len(key) // 2
    assert [(k.id, k.user) for k in service.keys.list("default", "pets")] == [(row.id, "ann")]
    assert service.keys.find(key) == ("default", "pets") and service.keys.cached(key) == ("default", "pets")
    assert service.keys.find(key + "x") is None
    with pytest.raises(NotFound, match="has no key 'k-none'"):
        service.keys.revoke("default", "pets", "k-none")
    assert service.keys.revoke("default", "pets", row.id) == [row.id]
    assert service.keys.cached(key) is None and service.keys.find(key) is None
    other, _ = service.keys.create("default", "pets")
    service.delete("default", "pets")
    with serving_platform.session() as session:
        assert session.get(DeploymentKey, other.id) is None  # the deployment's keys go with it


def test_key_commands(serving_platform, toy, capsys):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--home", serving_platform.home, "deployment", "key", *args])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, err = run("create", "pets")
    key = out.strip()
    assert code == 0 and key.startswith("kpldk_") and "shown this once" in err
    created = json.loads(run("create", "pets", "--json")[1])
    listed = json.loads(run("list", "pets", "--json")[1])
    assert [k["id"] for k in listed][1] == created["id"] and all("key" not in k for k in listed)
    assert key.startswith(listed[0]["prefix"])
    code, out, _ = run("list", "pets")
    assert code == 0 and "KEY ID" in out and listed[0]["id"] in out and key not in out
    code, out, _ = run("revoke", "pets", listed[0]["id"])
    assert code == 0 and "revoked" in out
    assert service.keys.find(key) is None and service.keys.find(created["key"]) == ("default", "pets")
    code, _, err = run("revoke", "pets", listed[0]["id"])
    assert code == 2 and f"has no key {listed[0]['id']!r}" in err
    code, _, err = run("create", "nothing")
    assert code == 2 and "deployment 'nothing' not found" in err


@pytest.fixture
def two_deployments(kpl_server, tmp_path):
    """Deploy `alpha` and `beta` in the live server's home; yield the platform."""
    platform = Platform(home=str(kpl_server.home), config=Config({"Ledger": {"cpu": 16.0, "memory": 65536}}))
    algorithm = toy_algorithm(tmp_path / "toy-serve")
    platform.catalog.add_algorithm("default", algorithm, name="toy-serve")
    refs = []
    for label in ("cat", "dog"):
        (tmp_path / label).mkdir()
        (tmp_path / label / "label.txt").write_text(label)
        refs.append(platform.catalog.add_model("default", "keyed-model", tmp_path / label).ref)
    service = platform.deployments
    service.create("default", "alpha", refs[0], algorithm="toy-serve")
    service.create("default", "beta", refs[1], algorithm="toy-serve")
    try:
        service.wait("default", "alpha", WAIT)
        service.wait("default", "beta", WAIT)
        yield platform, refs
    finally:
        for name in ("alpha", "beta"):
            service.delete("default", name)
        platform.close()


def _call(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, error.headers, json.loads(error.read() or b"null")


def test_a_key_opens_its_deployments_predict_and_nothing_else(kpl_server, two_deployments):
    platform, (cat, dog) = two_deployments
    api = kpl_server.url + "kpl/api/"
    token = {"Authorization": f"token {kpl_server.token}"}
    status, _, created = _call(api + "deployments/alpha/keys", "POST", b"", token)
    assert status == 201 and created["key"].startswith(created["prefix"])
    key = created["key"]
    status, _, listed = _call(api + "deployments/alpha/keys", headers=token)
    assert status == 200 and [k["id"] for k in listed["keys"]] == [created["id"]]
    assert "key" not in listed["keys"][0]
    bearer, header = {"Authorization": f"Bearer {key}"}, {"X-KPL-API-Key": key}
    for credentials in (bearer, header):
        status, headers, answer = _call(
            api + "deployments/alpha/predict", "POST", b"img-1", {**credentials, "Content-Type": "image/png"}
        )
        assert (status, answer["class_name"], headers["X-KPL-Model-Version"]) == (200, "cat", cat)
    status, _, answer = _call(api + "deployments/alpha/predict", "POST", b"text", bearer)
    assert (status, answer["message"]) == (400, "not an image (application/x-www-form-urlencoded)")
    # the same key: another deployment, another project, every other route
    status, _, answer = _call(api + "deployments/beta/predict", "POST", b"img", bearer)
    assert (status, answer["message"]) == (403, "this key is for deployment 'alpha' only")
    status, _, _ = _call(api + "deployments/alpha/predict?project=other", "POST", b"img", bearer)
    assert status == 403
    for method, path in (
        ("GET", "deployments/alpha"),
        ("GET", "deployments"),
        ("GET", "deployments/alpha/keys"),
        ("POST", "deployments/alpha/keys"),
        ("DELETE", "deployments/alpha"),
        ("GET", "models"),
    ):
        for credentials in (bearer, header):
            status, _, _ = _call(api + path, method, b"" if method == "POST" else None, credentials)
            assert status == 403, (method, path, credentials)
    assert platform.deployments.get("default", "alpha").name == "alpha"  # the DELETE did nothing
    status, _, _ = _call(api + "deployments/alpha/predict", "POST", b"img", {"X-KPL-API-Key": key[:-1]})
    assert status == 403
    status, _, _ = _call(api + "deployments/alpha/predict", "POST", b"img")
    assert status == 403  # no credentials at all
    # the server's token still predicts; a revoked key no longer does
    status, _, answer = _call(api + "deployments/beta/predict", "POST", b"img", token)
    assert (status, answer["class_name"]) == (200, "dog")
    status, _, _ = _call(api + f"deployments/alpha/keys/{created['id']}", "DELETE", None, token)
    assert status == 200
    status, _, answer = _call(api + "deployments/alpha/predict", "POST", b"img", bearer)
    assert (status, answer["message"]) == (403, "this deployment key is unknown or revoked")
    status, _, answer = _call(api + "deployments/alpha/keys/k-none", "DELETE", None, token)
    assert (status, answer["field"]) == (404, "key_id")
