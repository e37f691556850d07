"""The single-user server's /metrics (Jupyter Server's, token required) carries the platform's metrics too."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError


def kpl_routes(text: str) -> set[tuple[str, str, str]]:
    for family in text_string_to_metric_families(text):
        if family.name == "kpl_http_request_duration_seconds":
            return {(s.labels["method"], s.labels["route"], s.labels["status"]) for s in family.samples}
    return set()


async def test_metrics_need_the_servers_token_and_name_routes_not_paths(jp_fetch, jp_serverapp):
    with pytest.raises(HTTPClientError) as refused:
        await jp_fetch("metrics", headers={"Authorization": ""})
    assert refused.value.code == 403
    await jp_fetch("kpl", "api", "version")
    with pytest.raises(HTTPClientError):
        await jp_fetch("kpl", "api", "datasets", "no-such-dataset")
    monitor = next(iter(jp_serverapp.extension_manager.extension_apps["kpl_lab"])).monitor
    monitor.sample(force=True)
    text = (await jp_fetch("metrics")).body.decode()
    seen = kpl_routes(text)
    assert ("GET", "/kpl/api/version", "200") in seen
    assert ("GET", "/kpl/api/datasets/{name}", "404") in seen
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {
        "kpl_jobs",
        "kpl_machine_cpu_percent",
        "kpl_reserved_cpus",
        "http_request_duration_seconds",
    } <= families
