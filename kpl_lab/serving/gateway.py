"""The gateway: route one prediction to a ready replica of a deployment and answer what it said.

The routing table (versions, canary weight, ready replica URLs) of a deployment is kept in
memory: a change made through this process's `DeploymentService` drops it at once, and
one older than `ROUTING_TTL_SECONDS` is read again in the background while requests keep
using it (changes by other processes, replicas that became ready). Requests go over
kept-alive connections (`upstream.Upstream`) and are counted in memory
(`history.RequestHistory`, written by the platform's background round): no database work
on the request path. A request goes to the canary with the canary's weight (by a hash of
the sticky header when the deployment names one, so a caller keeps its version), else to
production; a replica that stopped listening (and is no longer listed as ready) is skipped
for another one. With no replica ready the answer is 503 with the deployment's state and
reason, at once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass

from ..errors import Unavailable
from .history import RequestHistory
from .service import DeploymentService, Routing
from .upstream import Answer, NoAnswer, StaleConnection, Upstream

VERSION_HEADER = "X-KPL-Model-Version"
ROUTING_TTL_SECONDS = 0.5
CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 300.0
ATTEMPTS = 3  # a replica that stopped listening (a promote, a crash) is skipped for another


@dataclass
class Prediction:
    """A replica's answer: status, JSON body and the model version that made it."""

    status: int
    body: bytes
    model_version: str

    def json(self) -> dict:
        """Return the body with `model_version` added."""
        return {**json.loads(self.body), "model_version": self.model_version}


def pick_version(routing: Routing, caller: str | None) -> str:
    """Return the version one request goes to: the canary with its weight, else production."""
    if not routing.canary or routing.canary_weight <= 0:
        return routing.production
    bucket = zlib.crc32(caller.encode()) % 100 if caller else random.randrange(100)
    return routing.canary if bucket < routing.canary_weight else routing.production


class Gateway:
    """Forward predictions to replicas, with each deployment's routing table kept in memory."""

    def __init__(self, service: DeploymentService, executor: Executor | None = None) -> None:
        self.service = service
        self.executor = executor
        self.upstream = Upstream(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)
        self._routes: dict[tuple[str, str], tuple[float, int, Routing]] = {}  # until, generation, table
        self._refreshing: dict[tuple[str, str], asyncio.Task] = {}
        self._turn = itertools.count()
        self.history = RequestHistory()

    def flush_metrics(self) -> int:
        """Write the request metrics counted so far to the catalog (blocking: run it off the event loop)."""
        return self.history.flush(self.service.platform)

    def sweep(self) -> None:
        """End the predictions sent from memory (`predict_now`) that had no answer in time (call it every few seconds)."""
        self.upstream.sweep()

    def close(self) -> None:
        """Write the metrics counted so far and close the kept-alive connections."""
        self.flush_metrics()
        self.upstream.close()
        self._routes.clear()

    async def routing(self, project: str, name: str, fresh: bool = False) -> Routing:
        """Return a deployment's routing table: the one in memory unless this process changed it."""
        cached = None if fresh else self._cached(project, name)
        return cached if cached is not None else await self._read((project, name))

    def _cached(self, project: str, name: str) -> Routing | None:
        """Return the routing table in memory (an old one is read again in the background), or None."""
        key = (project, name)
        cached = self._routes.get(key)
        if cached is None or cached[1] != self.service.generation:
            return None
        if cached[0] < time.monotonic() and key not in self._refreshing:
            self._refreshing[key] = asyncio.ensure_future(self._refresh(key))
        return cached[2]

    async def _read(self, key: tuple[str, str]) -> Routing:
        generation = self.service.generation  # a change while reading makes the next request read again
        loop = asyncio.get_running_loop()
        routing = await loop.run_in_executor(self.executor, self.service.routing, *key)
        if routing.ready:  # while none is ready, every request looks again: the first ready one serves
            self._routes[key] = (time.monotonic() + ROUTING_TTL_SECONDS, generation, routing)
        else:
            self._routes.pop(key, None)
        return routing

    async def _refresh(self, key: tuple[str, str]) -> None:
        """Read a routing table again in the background; a deleted deployment is forgotten."""
        try:
            await self._read(key)
        except Exception:  # deleted, or the database failed: the next request reads it and says so
            self._routes.pop(key, None)
        finally:
            self._refreshing.pop(key, None)

    async def predict(
        self,
        project: str,
        name: str,
        body: bytes,
        content_type: str = "application/octet-stream",
        headers: Mapping[str, str] | Callable[[str], str | None] | None = None,
    ) -> Prediction:
        """Send one request body to a replica; raise Unavailable (503) while none is ready."""
        start = time.perf_counter()
        routing = await self.routing(project, name)
        version = _pick(routing, headers)
        try:
            prediction = await self._forward(project, name, routing, version, body, content_type)
        except Unavailable:
            self.history.record(project, name, version, None, True, time.time())
            raise
        return self._counted(project, name, prediction, start)

    def predict_now(
        self,
        project: str,
        name: str,
        body: bytes,
        content_type: str,
        headers: Mapping[str, str] | Callable[[str], str | None] | None,
        done: Callable[[Prediction | Exception], None],
    ) -> bool:
        """Send the body at once when the routing table and an idle connection are in memory; else return False.

        `done` gets the prediction (or the exception `predict` would raise) from a callback,
        with no task per request; what the in-memory path cannot finish goes on in `predict`.
        """
        routing = self._cached(project, name)
        if routing is None:
            return False
        version = _pick(routing, headers)
        urls = routing.ready.get(version)
        if not urls:
            return False
        start = time.perf_counter()

        def answered(outcome: Answer | Exception) -> None:
            if isinstance(outcome, StaleConnection):  # closed while idle: the full path sends it again
                retry = asyncio.ensure_future(self.predict(project, name, body, content_type, headers))
                retry.add_done_callback(
                    lambda task: task.cancelled() or done(task.exception() or task.result())
                )
                return
            prediction = _prediction(outcome, version)
            done(prediction)  # the caller's answer goes out first: counting is off its path
            self._counted(project, name, prediction, start)

        url = urls[next(self._turn) % len(urls)]
        return self.upstream.post_now(url, "/predict", body, content_type, answered)

    def _counted(self, project: str, name: str, prediction: Prediction, start: float) -> Prediction:
        """Count a prediction that took since `start` (perf_counter) in the request history; return it."""
        milliseconds = (time.perf_counter() - start) * 1000
        self.history.record(
            project, name, prediction.model_version, milliseconds, prediction.status >= 400, time.time()
        )
        return prediction

    async def _forward(
        self, project: str, name: str, routing: Routing, version: str, body: bytes, content_type: str
    ) -> Prediction:
        """Send the body to a ready replica of `version` (another one if it stopped listening)."""
        failure, url, served = "", None, version
        for attempt in range(ATTEMPTS):
            if attempt:
                routing = await self.routing(project, name, fresh=True)
                if any(url in found for found in routing.ready.values()):
                    # still listed as ready: it may have died of this very input, which must not
                    # take down the other replicas too
                    return Prediction(502, _error(f"the replica did not answer: {failure}"), served)
            urls = routing.ready.get(version) or next((p for p in routing.ready.values() if p), [])
            if not urls:
                why = f": {routing.reason}" if routing.reason else ""
                raise Unavailable(f"deployment {name!r} has no ready replica ({routing.state}{why})")
            served = version if routing.ready.get(version) else _version_of(routing, urls)
            url = urls[next(self._turn) % len(urls)]
            try:
                return _prediction(await self.upstream.post(url, "/predict", body, content_type), served)
            except NoAnswer as error:
                failure = str(error)
                if error.sent:
                    return _prediction(error, served)
        raise Unavailable(f"deployment {name!r}: no replica answered ({failure})")


def _pick(routing: Routing, headers) -> str:
    """Return the version a request goes to, by the sticky header when the deployment names one."""
    return pick_version(routing, _header(headers, routing.sticky_header) if routing.sticky_header else None)


def _prediction(outcome: Answer | NoAnswer, version: str) -> Prediction:
    """Return what a replica's answer (or its dying on the request) means to the caller."""
    if isinstance(outcome, NoAnswer):  # it took the request and died: another replica could die of it too
        return Prediction(502, _error(str(outcome)), version)
    status = outcome.status if outcome.status < 500 else 502  # the model's failure, not the gateway's
    return Prediction(status, outcome.body or b"{}", version)


def _error(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def _header(headers, name: str) -> str | None:
    if headers is None:
        return None
    return headers(name) if callable(headers) else headers.get(name)


def _version_of(routing: Routing, urls: list[str]) -> str:
    return next(version for version, found in routing.ready.items() if found is urls)
