"""Request metrics history: counted in memory by the gateway, written to the catalog in 10 s buckets, read as series."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from kpl_lab.catalog.deployments import DeploymentMetrics
from kpl_lab.errors import Unavailable
from kpl_lab.serving import history
from kpl_lab.serving.describe import deployment_model
from kpl_lab.serving.gateway import Gateway
from kpl_lab.serving.history import RequestHistory, latency_bin, percentile

WAIT = 120.0


def test_percentiles_of_the_histogram_are_within_five_percent():
    rng = random.Random(7)
    values = [rng.lognormvariate(1.0, 1.2) for _ in range(5000)] + [0.01, 90_000.0]
    histogram: dict[int, int] = {}
    for value in values:
        histogram[latency_bin(value)] = histogram.get(latency_bin(value), 0) + 1
    ordered = sorted(values)
    for fraction in (0.5, 0.9, 0.99):
        exact = ordered[int(fraction * len(ordered)) - 1]
        assert abs(percentile(histogram, fraction) - exact) <= 0.05 * exact + 0.01
    assert percentile({}, 0.5) is None
    assert percentile(histogram, 1.0) == pytest.approx(90_000.0, rel=0.05)


def test_buckets_from_two_processes_add_up_and_read_as_series(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    deployment = service.get("default", "pets")
    start = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC).timestamp()
    server, cli = RequestHistory(), RequestHistory()
    for i in range(10):
        server.record("default", "pets", "m:a", 2.0, i == 0, start + 1)
    server.record("default", "pets", "m:b", 8.0, False, start + 12)  # the next bucket
    cli.record("default", "pets", "m:a", 4.0, False, start + 9)
    cli.record("default", "pets", "m:a", None, True, start + 9)  # a 503: no latency
    cli.record("default", "nothing", "m:a", 4.0, False, start + 9)  # no such deployment: dropped
    assert server.flush(serving_platform) == 2 and cli.flush(serving_platform) == 2
    assert server.flush(serving_platform) == 0  # nothing counted since
    with serving_platform.session() as session:
        assert session.scalar(select(func.count()).select_from(DeploymentMetrics)) == 2
    series, totals = history.series(serving_platform, deployment.id, datetime.fromtimestamp(start, UTC))
    (point,) = series["m:a"]
    assert (point["time"], point["requests"], point["errors"]) == (datetime.fromtimestamp(start, UTC), 12, 2)
    assert point["p50_ms"] == pytest.approx(2.0, rel=0.05) and point["p99_ms"] == pytest.approx(4.0, rel=0.05)
    assert [p["time"].timestamp() - start for p in series["m:b"]] == [10.0]
    assert totals["m:b"] == {
        "requests": 1,
        "errors": 0,
        "p50_ms": pytest.approx(8.0, rel=0.05),
        "p99_ms": totals["m:b"]["p50_ms"],
    }
    later, _ = history.series(serving_platform, deployment.id, datetime.fromtimestamp(start + 10, UTC))
    assert list(later) == ["m:b"]
    assert history.totals(serving_platform, deployment.id)["m:a"]["requests"] == 12
    service.delete("default", "pets")
    with serving_platform.session() as session:  # the deployment's metrics go with it
        assert session.scalar(select(func.count()).select_from(DeploymentMetrics)) == 0


def test_old_buckets_are_dropped_as_new_ones_are_written(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    recorder = RequestHistory()
    old = datetime.now(UTC) - timedelta(days=history.RETENTION_DAYS, minutes=1)
    recorder.record("default", "pets", "m:a", 1.0, False, old.timestamp())
    recorder.flush(serving_platform)  # written, then dropped at once: it is past the retention
    recorder.record("default", "pets", "m:a", 1.0, False, datetime.now(UTC).timestamp())
    recorder.flush(serving_platform)
    with serving_platform.session() as session:
        kept = list(session.scalars(select(DeploymentMetrics)))
    assert len(kept) == 1 and kept[0].requests == 1


def test_the_gateway_counts_each_version_and_writes_on_close(serving_platform, toy, tmp_path):
    service = serving_platform.deployments
    hold = tmp_path / "hold"
    production, canary = toy("cat", hold=hold), toy("dog")
    service.create("default", "pets", production, algorithm="toy-serve")
    gateway = Gateway(service)

    async def scenario():
        with pytest.raises(Unavailable):  # counted as an error of the version it was meant for
            await gateway.predict("default", "pets", b"img")
        hold.unlink()
        await asyncio.get_running_loop().run_in_executor(None, service.wait, "default", "pets", WAIT)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: service.canary("default", "pets", canary, 30, algorithm="toy-serve")
        )
        await asyncio.get_running_loop().run_in_executor(None, service.wait, "default", "pets", WAIT)
        answers = [await gateway.predict("default", "pets", b"img") for _ in range(200)]
        answers.append(await gateway.predict("default", "pets", b"text"))  # bad input: an error
        assert not history.totals(serving_platform, service.get("default", "pets").id)  # nothing written yet
        gateway.close()
        return answers

    answers = asyncio.run(scenario())
    served = [a.model_version for a in answers]
    totals = history.totals(serving_platform, service.get("default", "pets").id)
    assert totals[canary]["requests"] == served.count(canary) > 0
    assert totals[production]["requests"] == served.count(production) + 1  # and the 503
    assert totals[production]["errors"] + totals[canary]["errors"] == 2
    assert 0 < totals[production]["p50_ms"] <= totals[production]["p99_ms"]
    model = deployment_model(service, service.get("default", "pets"))
    assert {v: m.requests for v, m in model.totals.items()} == {v: t["requests"] for v, t in totals.items()}
