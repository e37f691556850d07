"""Measure the gateway process's own Python per prediction, without sockets or other processes' turns.

A real platform with one deployment (the echo model of serving.py) and a deployment API
key; the gateway process's request handling (`GatewayApp.handle` behind the HTTP server's
`_Connection`, the replica link's `_Link`) is fed a kept-alive caller's request and the
replica's answer through stand-in transports that only collect what is written. The time
per round trip is Python alone, hot in the caches: what serving.py's one-client ratio
pays for the gateway's work on top of the kernel's and asyncio's. `--profile` prints
where it goes (cProfile, sorted by own time).

    python benchmarks/gateway_python.py                  # 50,000 predictions
    python benchmarks/gateway_python.py --requests 5000 --profile
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

from traitlets.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serving import ENVIRONMENT, SERVE  # noqa: E402 - the echo model serving.py deploys

WARM = 2000
ANSWER = b'{"height": 1, "width": 1024, "depth": 1, "class_id": 0, "class_name": "a"}'


class Collecting:
    """A transport that keeps what is written and never closes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def writelines(self, parts) -> None:
        self.written.append(b"".join(parts))

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


async def measure(app, key: str, requests: int, profile: bool) -> float:
    """Return seconds per prediction through `app` with the replica's answer fed back at once."""
    from kpl_lab.serving import http_server, keys

    # the loop below never yields to the event loop, where a key checked again (every
    # CACHE_SECONDS) is looked up: keep it remembered for the whole run
    keys.CACHE_SECONDS = 24 * 3600
    gateway = app.gateway
    routing = await gateway.routing("default", "bench")
    url = next(iter(routing.ready.values()))[0]
    await gateway.upstream.post(url, "/predict", b"warm", "application/octet-stream")  # a real idle link
    (link,) = gateway.upstream._idle[url]
    link.transport = replica = Collecting()
    connection = http_server._Connection(app.handle, 1 << 20)
    connection.connection_made(caller := Collecting())
    request = (
        b"POST /kpl/api/deployments/bench/predict HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept: */*\r\n"
        b"Content-Type: application/octet-stream\r\nX-KPL-API-Key: %s\r\nContent-Length: 1024\r\n\r\n"
        % key.encode()
    ) + os.urandom(1024)
    answer = (
        b"HTTP/1.1 200 OK\r\nServer: BaseHTTP/0.6 Python/3\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
    )
    # the first requests look the key up off the loop; later ones find it in memory
    while not caller.written:
        connection.data_received(request)
        while not replica.written and not caller.written:
            await asyncio.sleep(0.01)
        if replica.written:
            link.data_received(answer)
            await asyncio.sleep(0.01)
    for _ in range(WARM):
        connection.data_received(request)
        link.data_received(answer)
    assert caller.written[-1].startswith(b"HTTP/1.1 200"), caller.written[-1][:300]
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    start = time.perf_counter()
    for _ in range(requests):
        connection.data_received(request)
        link.data_received(answer)
    seconds = time.perf_counter() - start
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    gateway.upstream._idle.clear()  # the stand-in transport is no connection to close
    return seconds / requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--profile", action="store_true", help="print cProfile's table (slower)")
    args = parser.parse_args(argv)

    from kpl_lab.platform import Platform
    from kpl_lab.serving.gateway_process import GatewayApp

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        platform = Platform(
            home=str(base / "home"), config=Config({"Ledger": {"cpu": 16.0, "memory": 65536}})
        )
        algorithm = base / "echo"
        algorithm.mkdir()
        (algorithm / "environment.yml").write_text(ENVIRONMENT)
        (algorithm / "serve.py").write_text(SERVE)
        platform.catalog.add_algorithm("default", algorithm)
        (base / "a").mkdir()
        (base / "a" / "label.txt").write_text("a")
        model = platform.catalog.add_model("default", "echo-model", base / "a").ref
        service = platform.deployments
        service.create("default", "bench", model, algorithm="echo")
        app = GatewayApp(platform)
        try:
            service.wait("default", "bench", 120)
            _, key = service.keys.create("default", "bench")
            seconds = asyncio.run(measure(app, key, args.requests, args.profile))
            print(
                f"the gateway process's Python per prediction: {seconds * 1e6:.2f} µs ({args.requests} predictions)"
            )
        finally:
            service.delete("default", "bench")
            app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
