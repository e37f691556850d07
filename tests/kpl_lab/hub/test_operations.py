"""Operations through the platform service: /metrics as the hub protects its own, the audit log, alerts, logs, usage."""

from __future__ import annotations

import io
import json
import zipfile
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families
from traitlets.config import Config

from kpl_lab.catalog.jobs import Job
from kpl_lab.catalog.models import Project
from kpl_lab.monitoring.audit import login_hook

from .conftest import ACCESS

pytestmark = pytest.mark.databases
CLIENT = "203.0.113.7"  # the caller's address, as the proxy's X-Forwarded-For says it


def routes(text: str) -> set[tuple[str, str, str]]:
    """Return the (method, route, status) of the request histogram of an exposition."""
    for family in text_string_to_metric_families(text):
        if family.name == "kpl_http_request_duration_seconds":
            return {
                (s.labels["method"], s.labels["route"], s.labels["status"])
                for s in family.samples
                if "route" in s.labels
            }
    return set()


async def events(service, query: str = "") -> list[dict]:
    status, body, _ = await service.call("GET", f"admin/api/audit?{query}", token=service.hub.token("admin"))
    assert status == 200, body
    return body["events"]


async def test_metrics_need_the_scope_the_hub_asks_for_its_own(service):
    status, body, _ = await service.call("GET", "metrics")
    assert status == 403
    status, body, _ = await service.call("GET", "metrics", token=service.hub.token("admin"))
    assert status == 403 and "read:metrics" in body["message"]
    await service.call("GET", "api/datasets?project=vision", token=service.hub.token("alice"))
    await service.call("GET", "api/datasets/nothing?project=vision", token=service.hub.token("alice"))
    scraper = service.hub.token("admin", scopes=(ACCESS, "read:metrics"))
    status, text, response = await service.call("GET", "metrics", token=scraper)
    assert status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    seen = routes(text)
    assert ("GET", "/kpl/api/datasets", "200") in seen
    assert ("GET", "/kpl/api/datasets/{name}", "404") in seen  # the route, never the raw path
    assert ("GET", "/metrics", "403") in seen
    assert not any("nothing" in route for _, route, _ in seen)


async def test_changes_are_audited_with_who_and_from_where(service):
    headers = {"X-Forwarded-For": CLIENT}
    admin = service.hub.token("admin")
    status, body, _ = await service.call(
        "PUT", "admin/api/projects/vision/quota", token=admin, body={"cpu": 2}, headers=headers
    )
    assert status == 200, body
    [quota] = await events(service, "action=quota.set")
    assert (quota["user"], quota["target"], quota["client"], quota["outcome"]) == (
        "admin",
        "vision",
        CLIENT,
        "ok",
    )
    assert quota["detail"] == {"quota": {"cpu": 2}} and quota["status"] == 200


async def test_model_uploads_are_audited(service):
    alice = service.hub.token("alice")
    status, body, _ = await service.call(
        "POST", "api/models?project=vision&name=net&filename=weights.bin", token=alice, body=b"\x00" * 16
    )
    assert status == 201, body
    [upload] = await events(service, "action=model.upload")
    assert (upload["user"], upload["project"], upload["target"]) == ("alice", "vision", "net")


async def test_refusals_that_look_like_attacks_are_audited(service):
    alice = service.hub.token("alice")
    status, _, _ = await service.call(
        "GET", "admin/api/audit", token=alice, headers={"X-Forwarded-For": CLIENT}
    )
    assert status == 403  # platform data: members read none of it
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("../../etc/cron.d/evil", b"* * * * * root true\n")
    status, body, _ = await service.call(
        "POST", "api/datasets?project=vision&name=evil", token=alice, body=archive.getvalue()
    )
    assert status == 400 and "path traversal" in body["message"]
    status, _, _ = await service.call("GET", "api/datasets?project=vision", token="stolen")
    assert status == 403
    found = await events(service, "outcome=refused")
    assert [(e["user"], e["target"], e["status"]) for e in reversed(found)] == [
        ("alice", "/services/kpl/admin/api/audit", 403),
        ("alice", "/services/kpl/api/datasets", 400),
        ("", "/services/kpl/api/datasets", 403),
    ]
    assert found[-1]["client"] == CLIENT and found[1]["detail"]["method"] == "POST"
    assert "path traversal" in found[1]["detail"]["reason"]
    assert [e["action"] for e in found] == ["request.refused"] * 3


async def test_the_audit_log_filters_pages_and_exports_json_lines(service):
    audit = service.app.platform.audit
    for index in range(5):
        audit.record("deployment.create", user="bob", project="audio", target=f"api-{index}")
    audit.record("deployment.key.create", user="bob", project="audio", target="api-0/key")
    audit.record("login", user="carol", target="hub")
    status, page, _ = await service.call(
        "GET", "admin/api/audit?action=deployment.&limit=4", token=service.hub.token("admin")
    )
    assert status == 200, page
    assert [e["target"] for e in page["events"]] == ["api-0/key", "api-4", "api-3", "api-2"] and page["more"]
    status, older, _ = await service.call(
        "GET",
        f"admin/api/audit?action=deployment.&before={page['events'][-1]['id']}",
        token=service.hub.token("admin"),
    )
    assert [e["target"] for e in older["events"]] == ["api-1", "api-0"] and not older["more"]
    assert [e["target"] for e in await events(service, "user=carol")] == ["hub"]
    since = quote((datetime.now(UTC) + timedelta(minutes=1)).isoformat())
    assert await events(service, f"since={since}") == []
    status, text, response = await service.call(
        "GET", "admin/api/audit?format=jsonl&user=bob", token=service.hub.token("admin")
    )
    assert status == 200
    assert response.headers["Content-Type"].startswith("application/jsonl")
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == 6 and {line["user"] for line in lines} == {"bob"}
    status, body, _ = await service.call(
        "GET", "admin/api/audit?since=yesterday", token=service.hub.token("admin")
    )
    assert status == 400 and body["field"] == "since"


def test_the_hubs_logins_are_audited(platform):
    config = Config()
    config.Platform.home = platform.home
    config.Platform.database_url = platform.database_url
    authenticator = SimpleNamespace(config=config)
    handler = SimpleNamespace(request=SimpleNamespace(remote_ip=CLIENT))
    assert login_hook(authenticator, handler, {"name": "alice", "admin": False}) == {
        "name": "alice",
        "admin": False,
    }
    [event] = platform.audit.page(action="login").events
    assert (event.user, event.target, event.client) == ("alice", "hub", CLIENT)


def test_the_audit_log_keeps_a_bounded_number_of_events(platform):
    audit = platform.audit
    audit.max_events = 3
    for index in range(5):
        audit.record("login", user=f"u{index}")
    audit.flush()
    assert audit.prune() == 2
    assert [e.user for e in audit.page().events] == ["u4", "u3", "u2"]


async def test_alert_rules_through_the_admin_api(service):
    admin, alice = service.hub.token("admin"), service.hub.token("alice")
    rule = {
        "name": "queue",
        "metric": "project_jobs_queued",
        "threshold": 10,
        "duration_seconds": 600,
        "target": "vision",
    }
    status, body, _ = await service.call("POST", "admin/api/alerts/rules", token=alice, body=rule)
    assert status == 403
    status, body, _ = await service.call(
        "POST", "admin/api/alerts/rules", token=admin, body={**rule, "metric": "x"}
    )
    assert status == 400 and body["field"] == "metric"
    status, created, _ = await service.call("POST", "admin/api/alerts/rules", token=admin, body=rule)
    assert status == 201, created
    assert (created["scope"], created["target"], created["enabled"]) == ("project", "vision", True)
    status, body, _ = await service.call(
        "PUT", f"admin/api/alerts/rules/{created['id']}", token=admin, body={**rule, "threshold": 20}
    )
    assert status == 200 and body["threshold"] == 20
    status, overview, _ = await service.call("GET", "admin/api/alerts", token=admin)
    assert status == 200
    assert "queue" in [r["name"] for r in overview["rules"]]
    assert {s["name"]: s["scope"] for s in overview["signals"]}["deployment_error_percent"] == "deployment"
    status, _, _ = await service.call("DELETE", f"admin/api/alerts/rules/{created['id']}", token=admin)
    assert status == 200
    status, body, _ = await service.call("DELETE", f"admin/api/alerts/rules/{created['id']}", token=admin)
    assert status == 404
    actions = [(e["action"], e["target"]) for e in await events(service, "action=alert.rule.")]
    assert actions == [
        ("alert.rule.delete", "queue"),
        ("alert.rule.replace", "queue"),
        ("alert.rule.create", "queue"),
    ]


async def test_logs_are_searched_by_source_project_user_and_text(service):
    platform = service.app.platform
    with platform.session() as session:
        project = Project(name="vision")
        session.add(project)
        session.flush()
        for job_id, user in (("job-a", "alice"), ("job-b", "bob")):
            session.add(Job(id=job_id, project_id=project.id, function="train", state="failed", user=user))
    for job_id in ("job-a", "job-b"):
        with platform.session() as session:
            run_dir = platform.jobs.run_dir(session.get(Job, job_id))
        run_dir.mkdir(parents=True)
        (run_dir / "output.log").write_text(f"epoch 1\nCUDA out of memory in {job_id}\nbye\n")
    admin = service.hub.token("admin")
    status, body, _ = await service.call(
        "GET", "admin/api/logs?source=job&q=cuda+OUT&user=alice", token=admin
    )
    assert status == 200, body
    assert [(line["name"], line["line"]) for line in body["lines"]] == [
        ("job-a", "CUDA out of memory in job-a")
    ]
    assert body["lines"][0]["project"] == "vision" and not body["truncated"]

    service.app.logs.start("service-test")
    try:
        service.app.log.warning("kpl service: the search finds this line")
        status, body, _ = await service.call("GET", "admin/api/logs?q=finds+this", token=admin)
    finally:
        service.app.logs.stop()
    assert status == 200, body
    [line] = body["lines"]
    assert line["source"] == "platform" and "WARNING" in line["line"] and line["name"] == "service-test.log"
    status, body, _ = await service.call("GET", "admin/api/logs?source=mail", token=admin)
    assert status == 400 and body["field"] == "source"
    status, body, _ = await service.call("GET", "admin/api/logs", token=service.hub.token("alice"))
    assert status == 403


async def test_usage_history_is_asked_for_by_scope_and_period(service):
    admin = service.hub.token("admin")
    monitor = service.app.monitor
    monitor.sample(force=True)
    monitor.keep_history()
    status, body, _ = await service.call("GET", "admin/api/usage?scope=machine&period=3600", token=admin)
    assert status == 200, body
    assert body["name"] == monitor.live["machine"] and len(body["points"]) == 1
    assert {"cpu_percent", "memory_percent"} <= set(body["points"][0]["use"])
    status, body, _ = await service.call("GET", "admin/api/usage?scope=team", token=admin)
    assert status == 400 and body["field"] == "scope"
    status, body, _ = await service.call("GET", "admin/api/usage?period=5", token=admin)
    assert status == 400 and body["field"] == "period"
