"""Measure the serving gateway against calling a replica directly: added latency, throughput, split accuracy.

Everything is real: a platform home with SQLite, one deployment of a model whose deploy
answers a small classification at once (so the numbers are the serving path's, not a
model's), a `jupyter server` with the kpl_lab extension in front of it. Each request is
a 1 KiB body POSTed by tornado's curl client with kept-alive connections, `--clients`
of them in flight at once. Then the clients a gateway could forward with, one request at
a time to the replica: latency and this process's CPU per request. Last, the gateway
process against nginx (the reverse proxy users put in front of model servers; one worker,
kept-alive upstream connections, no access log) in front of the same replica: `--rounds`
interleaved rounds of direct, gateway process, nginx and the floor (`floor_proxy.py`: the
least an asyncio proxy in Python does, none of the gateway's work), medians of them.
Debian: `apt-get install nginx-light`; without nginx that table has no nginx columns.
`--model digits` puts seed 001's model there instead: the digits example trained for two
epochs, its `deploy` answering a real test image (what a model's own work does to the ratios).

    python benchmarks/serving.py                           # 2000 requests per run, 10k for the split
    python benchmarks/serving.py --requests 300 --clients 1,8 --split-requests 1000
    python benchmarks/serving.py --only-proxies --rounds 5   # the gateway process against nginx only
    python benchmarks/serving.py --only-proxies --model digits --clients 1   # the same, serving the digits model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pwd
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from trained_example import train

ENVIRONMENT = """\
version: 1
deploy:
  resource:
    limits:
      cpu: 0.1
      memory: 128
  inputs:
    - key: model
      name: model
  cmd: python serve.py
"""
SERVE = """\
import os
from kpl_helper import deploy, io

label = open(os.path.join(io.get_input_path(key="model"), "label.txt")).read()
deploy.serve(lambda data, content_type: deploy.ClassificationResponse.dumps(1, len(data), 1, 0, label))
"""
BODY = os.urandom(1024)
START_TIMEOUT = 120.0


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) a process has used, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(fraction * len(ordered) + 0.999999) - 1))]


def post_request(url: str, headers: dict, body: bytes = BODY):
    """Return tornado's POST of `body` to `url`: http://… or a replica's `unix:PATH` (its /predict, through curl)."""
    from tornado.httpclient import HTTPRequest

    if not url.startswith("unix:"):
        return HTTPRequest(url, method="POST", body=body, headers=headers)
    import pycurl

    def on_socket(curl) -> None:
        curl.setopt(pycurl.UNIX_SOCKET_PATH, url.removeprefix("unix:"))

    return HTTPRequest(
        "http://localhost/predict", method="POST", body=body, headers=headers, prepare_curl_callback=on_socket
    )


async def load(
    url: str, headers: dict, requests: int, clients: int, body: bytes = BODY
) -> tuple[list[float], float, list[str]]:
    """Send `requests` POSTs of `body` with `clients` in flight; return latencies (ms), seconds, served versions."""
    from tornado.curl_httpclient import CurlAsyncHTTPClient

    client = CurlAsyncHTTPClient(force_instance=True, max_clients=clients)
    latencies, versions = [], []
    left = iter(range(requests))

    async def worker():
        for _ in left:
            start = time.perf_counter()
            answer = await client.fetch(post_request(url, headers, body))
            latencies.append((time.perf_counter() - start) * 1000)
            versions.append(answer.headers.get("X-KPL-Model-Version", ""))

    # warm the connections first: the measured run starts with them open
    await asyncio.gather(*(client.fetch(post_request(url, headers, body)) for _ in range(clients)))
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - start
    client.close()
    return latencies, seconds, versions


async def load_in_process(gateway, requests: int, clients: int) -> tuple[list[float], float]:
    """Call the Gateway object itself (no HTTP server in front); return latencies (ms) and seconds."""
    latencies = []
    left = iter(range(requests))

    async def worker():
        for _ in left:
            start = time.perf_counter()
            await gateway.predict("default", "bench", BODY)
            latencies.append((time.perf_counter() - start) * 1000)

    await asyncio.gather(*(gateway.predict("default", "bench", BODY) for _ in range(clients)))
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    seconds = time.perf_counter() - start
    gateway.close()
    return latencies, seconds


async def compare_clients(url: str, requests: int) -> list[tuple[str, float, float]]:
    """Return (client, p50 ms, CPU µs of this process per request) of sequential POSTs to a replica.

    The clients a gateway could forward with: tornado's curl client and its simple client
    (both kept alive where they can; the simple one speaks TCP only), and the gateway's own
    asyncio forwarder. `url`: the replica's address (unix:PATH or http://HOST:PORT).
    """
    from tornado.curl_httpclient import CurlAsyncHTTPClient
    from tornado.simple_httpclient import SimpleAsyncHTTPClient

    from kpl_lab.serving.upstream import Upstream

    curl = CurlAsyncHTTPClient(force_instance=True)
    simple = SimpleAsyncHTTPClient(force_instance=True)
    upstream = Upstream(5.0, 60.0)
    target = url if url.startswith("unix:") else url + "/predict"
    headers = {"Content-Type": "application/octet-stream"}
    senders = {
        "tornado curl": lambda: curl.fetch(post_request(target, headers)),
        "tornado simple": lambda: simple.fetch(post_request(target, headers)),
        "asyncio forwarder": lambda: upstream.post(url, "/predict", BODY, "application/octet-stream"),
    }
    if url.startswith("unix:"):
        del senders["tornado simple"]
    found = []
    for name, send in senders.items():
        for _ in range(20):
            await send()
        latencies, cpu = [], time.process_time()
        for _ in range(requests):
            start = time.perf_counter()
            await send()
            latencies.append((time.perf_counter() - start) * 1000)
        found.append((name, percentile(latencies, 0.5), (time.process_time() - cpu) / requests * 1e6))
    curl.close()
    simple.close()
    upstream.close()
    return found


async def load_get(url: str, headers: dict, requests: int) -> list[float]:
    """Return the latencies (ms) of sequential GETs: the Jupyter server's own cost per request."""
    from tornado.curl_httpclient import CurlAsyncHTTPClient

    client = CurlAsyncHTTPClient(force_instance=True)
    await client.fetch(url, headers=headers)
    latencies = []
    for _ in range(requests):
        start = time.perf_counter()
        await client.fetch(url, headers=headers)
        latencies.append((time.perf_counter() - start) * 1000)
    client.close()
    return latencies


def start_server(home: Path, base: Path) -> tuple[subprocess.Popen, str, str]:
    """Start `jupyter server` with only kpl_lab on the platform home; return it, its URL and token."""
    config, runtime, root = base / "config", base / "runtime", base / "root"
    for folder in (config, runtime, root):
        folder.mkdir()
    extensions = {
        "kpl_lab": True,
        "jupyterlab": False,
        "jupyter_lsp": False,
        "jupyter_server_terminals": False,
    }
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": extensions}})
    )
    port, token = free_port(), secrets.token_hex(16)
    env = {
        **os.environ,
        "KPL_LAB_HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_RUNTIME_DIR": str(runtime),
    }
    log = open(base / "server.log", "wb")  # noqa: SIM115 - closed with the process
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter",
            "server",
            "--allow-root",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.token={token}",
            f"--ServerApp.root_dir={root}",
            "--Ledger.cpu=16",
            "--ServerApp.log_level=WARN",
        ],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/kpl/api/"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            request = urllib.request.Request(url + "version", headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(request, timeout=5):
                return server, url, token
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((base / "server.log").read_text()[-3000:]) from None
            time.sleep(0.2)


NGINX_CONFIG = """\
daemon off;
master_process off;
worker_processes 1;
pid {base}/nginx.pid;
user {user};  # started as root, its workers open the replica's socket (private to this account) as root too
error_log {base}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {base}/nginx-body;
    proxy_temp_path {base}/nginx-proxy;
    fastcgi_temp_path {base}/nginx-fastcgi;
    uwsgi_temp_path {base}/nginx-uwsgi;
    scgi_temp_path {base}/nginx-scgi;
    upstream replica {{ server {replica}; keepalive 64; }}  # host:port or unix:PATH
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://replica/predict;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def start_nginx(replica: str, base: Path) -> tuple[subprocess.Popen, str] | None:
    """Start nginx as a reverse proxy to the replica; return it and its URL, or None without nginx."""
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        return None
    port = free_port()
    config = base / "nginx.conf"
    config.write_text(
        NGINX_CONFIG.format(
            base=base,
            replica=replica.removeprefix("http://"),
            port=port,
            user=pwd.getpwuid(os.geteuid()).pw_name,
        )
    )
    process = subprocess.Popen(
        [binary, "-p", str(base), "-c", str(config), "-e", "stderr"], stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/"
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"nginx did not start: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)


def start_floor(replica: str) -> tuple[subprocess.Popen, str]:
    """Start the floor reference proxy (floor_proxy.py) in front of the replica; return it and its URL."""
    script = Path(__file__).with_name("floor_proxy.py")
    process = subprocess.Popen([sys.executable, str(script), replica], stdout=subprocess.PIPE)
    assert process.stdout is not None
    return process, f"http://127.0.0.1:{int(process.stdout.readline())}/"


def compare_proxies(
    direct: str,
    process: tuple[int, str],
    references: list[tuple[str, int, str]],
    headers: dict,
    args,
    body: bytes = BODY,
) -> None:
    """Print direct, the gateway process and the references (name, pid, URL) in interleaved rounds:
    medians of p50 and throughput."""
    named = [("direct", None, direct, {}), ("process", *process, headers)]
    named += [(name, pid, url, {}) for name, pid, url in references]
    nginx = any(name == "nginx" for name, *_ in references)
    print(
        f"\nthe gateway process (API key) against nginx and the floor (floor_proxy.py) in front of the "
        f"same replica ({args.model} model); medians of {args.rounds} interleaved rounds of "
        f"{args.requests} requests of {len(body)} bytes; "
        "CPU: ms of the proxy's CPU per request"
    )
    columns = "".join(
        f" {n + ' p50':>11} {'added':>6} {n + '/s':>10} {'ratio':>5} {'CPU':>5}" for n, *_ in named[1:]
    )
    print(
        f"{'clients':>7} {'direct p50':>10} {'direct/s':>8}{columns}"
        + (f" {'process/nginx':>13}" if nginx else "")
    )
    for clients in (int(c) for c in args.clients.split(",")):
        found: dict[str, list[tuple[float, float, float]]] = {n: [] for n, *_ in named}
        for _ in range(args.rounds):
            for name, pid, url, extra in named:
                before = cpu_seconds(pid) if pid else 0.0
                latencies, seconds, _ = asyncio.run(
                    load(
                        url,
                        {"Content-Type": "application/octet-stream", **extra},
                        args.requests,
                        clients,
                        body,
                    )
                )
                cpu = (cpu_seconds(pid) - before) / args.requests * 1000 if pid else 0.0
                found[name].append((percentile(latencies, 0.5), args.requests / seconds, cpu))
        medians = {
            n: [statistics.median(r[i] for r in rounds) for i in range(3)] for n, rounds in found.items()
        }
        d50, d_rate, _ = medians["direct"]
        line = f"{clients:>7} {d50:>10.2f} {d_rate:>8.0f}"
        for name, *_ in named[1:]:
            p50, rate, cpu = medians[name]
            line += f" {p50:>11.2f} {p50 - d50:>6.2f} {rate:>10.0f} {rate / d_rate:>5.2f} {cpu:>5.2f}"
        if nginx:
            line += f" {medians['process'][1] / medians['nginx'][1]:>13.2f}"
        print(line)


def gateway_process_url(home: Path) -> tuple[int, str]:
    """Wait for the platform's gateway process; return its pid and its predict URL prefix."""
    from kpl_lab.serving import gateway_process

    deadline = time.monotonic() + START_TIMEOUT
    while (found := gateway_process.state(home)) is None or not found.get("port"):
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway process did not start: see <home>/gateway/gateway.log")
        time.sleep(0.1)
    return found["pid"], found["url"] + "/kpl/api/deployments/"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per run")
    parser.add_argument("--clients", default="1,8,32", help="concurrent clients, comma-separated")
    parser.add_argument("--split-requests", type=int, default=10_000, help="requests of the canary split run")
    parser.add_argument("--weight", type=int, default=20, help="canary weight of the split run (percent)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the proxies' comparison")
    parser.add_argument(
        "--only-proxies",
        action="store_true",
        help="only the gateway process against nginx (no Jupyter server)",
    )
    parser.add_argument(
        "--model",
        choices=("echo", "digits"),
        default="echo",
        help="the replica's model: echo answers at once; digits is the trained digits example (--only-proxies)",
    )
    args = parser.parse_args(argv)
    if args.model == "digits" and not args.only_proxies:
        parser.error("--model digits measures the proxies' comparison only: add --only-proxies")
    from traitlets.config import Config

    from kpl_lab.platform import Platform
    from kpl_lab.serving.gateway import Gateway

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        home = base / "home"
        platform = Platform(home=str(home), config=Config({"Ledger": {"cpu": 16.0, "memory": 65536}}))
        algorithm = base / "echo"
        algorithm.mkdir()
        (algorithm / "environment.yml").write_text(ENVIRONMENT)
        (algorithm / "serve.py").write_text(SERVE)
        platform.catalog.add_algorithm("default", algorithm)
        refs = []
        for label in ("a", "b"):
            (base / label).mkdir()
            (base / label / "label.txt").write_text(label)
            refs.append(platform.catalog.add_model("default", "echo-model", base / label).ref)
        service = platform.deployments
        served, body, algorithm_name = refs[0], BODY, "echo"
        if args.model == "digits":
            algorithm_name = "image-classification"
            served, body = train(home, base, algorithm_name, epochs=2)
        service.create("default", "bench", served, algorithm=algorithm_name)
        server, references = None, []
        try:
            service.wait("default", "bench", START_TIMEOUT)
            (replica,) = service.routing("default", "bench").ready[served]
            process_pid, process_url = gateway_process_url(home)
            direct = replica if replica.startswith("unix:") else f"{replica}/predict"
            headers = {"Content-Type": "application/octet-stream"}
            _, key = service.keys.create("default", "bench")
            with_key = {**headers, "X-KPL-API-Key": key}
            for name, started in (("nginx", start_nginx(replica, base)), ("floor", start_floor(replica))):
                if started is not None:  # no nginx installed: no nginx columns
                    references.append((name, *started))
            proxies = (
                (process_pid, process_url + "bench/predict"),
                [(name, running.pid, url) for name, running, url in references],
                {"X-KPL-API-Key": key},
            )
            if args.only_proxies:
                compare_proxies(direct, *proxies, args, body)
                return 0
            server, url, token = start_server(home, base)
            gateway = url + "deployments/bench/predict"
            authorized = {**headers, "Authorization": f"token {token}"}
            print(f"{args.requests} requests of {len(BODY)} bytes per run; one replica; latencies in ms")
            print(
                "gateway: POST /kpl/api/deployments/bench/predict of the Jupyter server with its token; "
                "key: the same with a deployment API key; in-process: the Gateway object called "
                "directly (no HTTP server in front); process: the platform's gateway process "
                "(kpl_lab.serving.gateway_process) with the API key; CPU: milliseconds of CPU the "
                "Jupyter server (gateway process) spent per request"
            )
            print(
                f"{'clients':>7} {'direct p50':>10} {'p99':>7} {'gateway p50':>11} {'p99':>7} "
                f"{'added p50':>9} {'p99':>7} {'key p50':>7} {'direct/s':>8} {'gateway/s':>9} {'ratio':>5} "
                f"{'key/s':>6} {'CPU':>5} {'in-process p50':>14} {'/s':>6} "
                f"{'process p50':>11} {'p99':>7} {'added p50':>9} {'p99':>7} {'/s':>6} {'ratio':>5} {'CPU':>5}"
            )
            for clients in (int(c) for c in args.clients.split(",")):
                d_lat, d_sec, _ = asyncio.run(load(direct, headers, args.requests, clients))
                cpu = cpu_seconds(server.pid)
                g_lat, g_sec, _ = asyncio.run(load(gateway, authorized, args.requests, clients))
                g_cpu = (cpu_seconds(server.pid) - cpu) / args.requests * 1000
                k_lat, k_sec, _ = asyncio.run(load(gateway, with_key, args.requests, clients))
                i_lat, i_sec = asyncio.run(load_in_process(Gateway(service), args.requests, clients))
                cpu = cpu_seconds(process_pid)
                p_lat, p_sec, _ = asyncio.run(
                    load(process_url + "bench/predict", with_key, args.requests, clients)
                )
                p_cpu = (cpu_seconds(process_pid) - cpu) / args.requests * 1000
                d50, d99, g50, g99, p50, p99 = (
                    percentile(d_lat, 0.5),
                    percentile(d_lat, 0.99),
                    percentile(g_lat, 0.5),
                    percentile(g_lat, 0.99),
                    percentile(p_lat, 0.5),
                    percentile(p_lat, 0.99),
                )
                d_rate, g_rate, k_rate = args.requests / d_sec, args.requests / g_sec, args.requests / k_sec
                i_rate, p_rate = args.requests / i_sec, args.requests / p_sec
                print(
                    f"{clients:>7} {d50:>10.2f} {d99:>7.2f} {g50:>11.2f} {g99:>7.2f} {g50 - d50:>9.2f} "
                    f"{g99 - d99:>7.2f} {percentile(k_lat, 0.5):>7.2f} {d_rate:>8.0f} {g_rate:>9.0f} "
                    f"{g_rate / d_rate:>5.2f} {k_rate:>6.0f} {g_cpu:>5.2f} {percentile(i_lat, 0.5):>14.2f} "
                    f"{i_rate:>6.0f} {p50:>11.2f} {p99:>7.2f} {p50 - d50:>9.2f} {p99 - d99:>7.2f} "
                    f"{p_rate:>6.0f} {p_rate / d_rate:>5.2f} {p_cpu:>5.2f}"
                )
            for name, p50, cpu in asyncio.run(compare_clients(replica, min(args.requests, 1000))):
                print(f"forwarding client {name}: p50 {p50:.2f} ms, {cpu:.0f} µs CPU per request")
            own = asyncio.run(load_get(url + "version", authorized, min(args.requests, 500)))
            print(
                f"the Jupyter server's own cost, GET /kpl/api/version: p50 {percentile(own, 0.5):.2f} ms, "
                f"p99 {percentile(own, 0.99):.2f} ms"
            )
            service.canary("default", "bench", refs[1], args.weight, algorithm="echo")
            service.wait("default", "bench", START_TIMEOUT)
            _, _, versions = asyncio.run(load(gateway, authorized, args.split_requests, 32))
            share = versions.count(refs[1]) / len(versions)
            expected = args.weight / 100
            # the binomial standard deviation of the share for this many requests
            sigma = (expected * (1 - expected) / len(versions)) ** 0.5
            print(
                f"canary split over {len(versions)} requests: {share:.2%} to the canary "
                f"(weight {args.weight} %, off by {abs(share - expected) / sigma:.1f} sigma)"
            )
            summary = service.metrics(service.get("default", "bench"))
            print("replica-side counts per version:", {v: m["requests"] for v, m in summary.items()})
            compare_proxies(direct, *proxies, args)
        finally:
            for running in (server, *(running for _, running, _ in references)):
                if running is not None:
                    running.terminate()
                    running.wait(timeout=30)
            service.delete("default", "bench")
            platform.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
