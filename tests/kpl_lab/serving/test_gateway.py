"""The gateway: version header, bad input as 4xx, 503 while not ready, canary split, sticky callers, promote."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from kpl_lab.errors import Unavailable
from kpl_lab.platform import Platform
from kpl_lab.serving.gateway import Gateway, pick_version
from kpl_lab.serving.service import Routing

WAIT = 120.0


def run(coroutine):
    return asyncio.run(coroutine)


async def _many(gateway: Gateway, count: int, name: str = "pets", **kwargs) -> list:
    return [await gateway.predict("default", name, b"img", "image/png", **kwargs) for _ in range(count)]


def test_pick_version_splits_by_weight_and_sticks_by_caller():
    routing = Routing(production="m:a", canary="m:b", canary_weight=20, sticky_header="X-User")
    picks = [pick_version(routing, None) for _ in range(5000)]
    assert 0.17 < picks.count("m:b") / len(picks) < 0.23
    assert len({pick_version(routing, "alice") for _ in range(50)}) == 1
    callers = [pick_version(routing, f"user-{i}") for i in range(2000)]
    assert 0.16 < callers.count("m:b") / len(callers) < 0.24
    assert (
        pick_version(Routing(production="m:a", canary=None, canary_weight=50, sticky_header=""), None)
        == "m:a"
    )


def test_predict_names_the_version_and_passes_bad_input_as_4xx(serving_platform, toy, tmp_path):
    service = serving_platform.deployments
    hold = tmp_path / "hold"
    model = toy("cat", hold=hold)
    service.create("default", "pets", model, algorithm="toy-serve")
    gateway = Gateway(service)

    async def scenario():
        with pytest.raises(Unavailable, match="no ready replica"):  # answered at once, never waits
            await gateway.predict("default", "pets", b"img")
        hold.unlink()
        await asyncio.get_running_loop().run_in_executor(None, service.wait, "default", "pets", WAIT)
        good = await gateway.predict("default", "pets", b"img-1", "image/png")
        bad = await gateway.predict("default", "pets", b"text", "text/plain")
        crash = await gateway.predict("default", "pets", b"crash")
        gateway.close()
        return good, bad, crash

    good, bad, crash = run(scenario())
    assert (good.status, good.model_version, good.json()["class_name"]) == (200, model, "cat")
    assert good.json()["model_version"] == model
    assert (bad.status, json.loads(bad.body)) == (400, {"error": "not an image (text/plain)"})
    assert crash.status == 502  # the model died of it: not retried on another replica, not a gateway 500


def test_canary_split_and_metrics_per_version(serving_platform, toy):
    service = serving_platform.deployments
    production, canary = toy("cat"), toy("dog")
    service.create("default", "pets", production, algorithm="toy-serve")
    service.canary("default", "pets", canary, 20, algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    gateway = Gateway(service)

    async def scenario():
        answers = await _many(gateway, 1000)
        gateway.close()
        return answers

    answers = run(scenario())
    served = [a.model_version for a in answers]
    assert {a.status for a in answers} == {200}
    assert 0.15 < served.count(canary) / len(served) < 0.25
    assert all(a.json()["class_name"] == ("dog" if a.model_version == canary else "cat") for a in answers)
    counts = service.metrics(service.get("default", "pets"))
    assert counts[canary]["requests"] == served.count(canary)
    assert counts[production]["requests"] == served.count(production)
    assert counts[production]["errors"] == 0 and counts[production]["p99_ms"] >= counts[production]["p50_ms"]


def test_sticky_header_keeps_a_caller_on_one_version(serving_platform, toy):
    service = serving_platform.deployments
    service.create("default", "pets", toy("cat"), algorithm="toy-serve")
    service.canary("default", "pets", toy("dog"), 50, algorithm="toy-serve", sticky_header="X-User")
    service.wait("default", "pets", WAIT)
    gateway = Gateway(service)

    async def scenario():
        found = {}
        for user in ("ann", "bob", "cy", "dee", "eve", "fay"):
            answers = await _many(gateway, 10, headers={"X-User": user})
            found[user] = {a.model_version for a in answers}
        gateway.close()
        return found

    found = run(scenario())
    assert all(len(versions) == 1 for versions in found.values())


def test_promote_drops_no_request(serving_platform, toy):
    service = serving_platform.deployments
    production, canary = toy("cat"), toy("dog")
    service.create("default", "pets", production, replica_count=2, algorithm="toy-serve")
    service.canary("default", "pets", canary, 10, algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    gateway = Gateway(service)
    promoted = threading.Event()

    async def traffic():
        answers = []
        stop_at = None
        while stop_at is None or time.monotonic() < stop_at:
            answers.append(await gateway.predict("default", "pets", b"img"))
            if promoted.is_set() and stop_at is None:
                stop_at = time.monotonic() + 1.0
        gateway.close()
        return answers

    async def scenario():
        loop = asyncio.get_running_loop()

        def promote():
            try:
                return service.promote("default", "pets", WAIT)
            finally:
                promoted.set()

        return await asyncio.gather(traffic(), loop.run_in_executor(None, promote))

    answers, deployment = run(scenario())
    assert deployment.model_version.ref == canary and deployment.canary_model_version is None
    assert len(answers) > 20 and {a.status for a in answers} == {200}
    assert answers[-1].model_version == canary
    roles = [s["role"] for s in service.replica_states(service.get("default", "pets"))]
    assert roles == ["production", "production"]


def test_routing_is_kept_until_changed_here_and_refreshed_in_the_background(serving_platform, toy):
    service = serving_platform.deployments
    production, canary = toy("cat"), toy("dog")
    service.create("default", "pets", production, algorithm="toy-serve")
    service.canary("default", "pets", canary, 0, algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    other = Platform(home=serving_platform.home, config=serving_platform.config)  # another process's view
    gateway = Gateway(service)

    async def scenario():
        first = await gateway.routing("default", "pets")
        assert await gateway.routing("default", "pets") is first  # from memory
        loop = asyncio.get_running_loop()
        # a change through this process's service is seen by the very next request
        await loop.run_in_executor(None, lambda: service.canary("default", "pets", canary, 100, "toy-serve"))
        assert (await gateway.predict("default", "pets", b"img")).model_version == canary
        # a change by another process: seen once the table is refreshed in the background
        await loop.run_in_executor(
            None, lambda: other.deployments.canary("default", "pets", canary, 0, "toy-serve")
        )
        deadline = time.monotonic() + WAIT
        while (await gateway.routing("default", "pets")).canary_weight != 0:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert (await gateway.predict("default", "pets", b"img")).model_version == production
        gateway.close()

    run(scenario())
    other.close()


def test_a_prediction_sent_from_memory_answers_as_predict_does(serving_platform, toy):
    service = serving_platform.deployments
    model = toy("cat")
    service.create("default", "pets", model, algorithm="toy-serve")
    service.wait("default", "pets", WAIT)
    gateway = Gateway(service)

    async def scenario():
        loop = asyncio.get_running_loop()

        def now(body: bytes, content_type: str = "image/png"):
            done = loop.create_future()
            return gateway.predict_now("default", "pets", body, content_type, None, done.set_result), done

        cold, _ = now(b"img-0")  # no routing table or connection in memory yet
        await gateway.predict("default", "pets", b"img-1", "image/png")
        found = []
        for body, content_type in ((b"img-2", "image/png"), (b"text", "text/plain"), (b"crash", "image/png")):
            started, done = now(body, content_type)
            found.append((started, await done))
        counted = gateway.history.buckets()
        gateway.close()
        return cold, found, counted

    cold, found, counted = run(scenario())
    assert cold is False
    assert [(started, p.status, p.model_version) for started, p in found] == [
        (True, 200, model),
        (True, 400, model),
        (True, 502, model),  # the model died of it: the full path's answer, not a gateway 500
    ]
    assert found[0][1].json()["class_name"] == "cat"
    assert sum(bucket.requests for bucket in counted.values()) == 4
    assert sum(bucket.errors for bucket in counted.values()) == 2
