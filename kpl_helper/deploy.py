"""Responses of a deployed model, in the shapes the serving page draws, and the server that answers them."""

import contextlib
import json
import os
import signal
import socketserver
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RectangleBoxObjectDetectionResponse:
    """Boxes found in one image."""

    _response_type = "rectangle_box_detection"

    def __init__(self, height, width, depth):
        self.height = height
        self.width = width
        self.depth = depth
        self.objects = []

    def add_object(self, name, xmin, ymin, xmax, ymax, score):
        self.objects.append(
            {
                "name": name,
                "score": float(score),
                "xmin": int(xmin),
                "ymin": int(ymin),
                "xmax": int(xmax),
                "ymax": int(ymax),
            }
        )

    def dumps(self, error=""):
        return {
            "type": type(self)._response_type,
            "height": self.height,
            "width": self.width,
            "depth": self.depth,
            "objects": self.objects,
            "error": error,
        }


class ClassificationResponse:
    """The class of one image."""

    _response_type = "classification"

    @staticmethod
    def dumps(height, width, depth, class_id, class_name=None, error="", score=None):
        response = {
            "type": ClassificationResponse._response_type,
            "height": height,
            "width": width,
            "depth": depth,
            "class_id": class_id,
            "class_name": class_name,
            "error": error,
        }
        if score is not None:  # an addition to the original's shape, so only when given
            response["score"] = float(score)
        return response


class SegmentationResponse:
    """The mask of one image."""

    _response_type = "segmentation"

    @staticmethod
    def dumps(height, width, depth, mask, error=""):
        return {
            "type": SegmentationResponse._response_type,
            "height": height,
            "width": width,
            "depth": depth,
            "mask": mask,
            "error": error,
        }


PORT_VARIABLE = "KPL_DEPLOY_PORT"
# a Unix socket path to listen on instead of the port: only the platform (and the deployment's user) reach it
SOCKET_VARIABLE = "KPL_DEPLOY_SOCKET"
MAX_BODY_BYTES = 64 * 1024 * 1024
LATENCY_SAMPLES = 2048


class BadInput(ValueError):
    """The request cannot be predicted on (not an image, wrong shape): answered as 400 with this message."""


class _Counters:
    """Requests, errors and recent latencies of this replica, for the platform's metrics."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.errors = 0
        self.latency_ms = []

    def record(self, failed: bool, milliseconds: float) -> None:
        with self.lock:
            self.requests += 1
            self.errors += failed
            self.latency_ms.append(round(milliseconds, 3))
            del self.latency_ms[:-LATENCY_SAMPLES]

    def to_json(self) -> dict:
        with self.lock:
            return {"requests": self.requests, "errors": self.errors, "latency_ms": list(self.latency_ms)}


def _as_json(result) -> dict:
    """Return what `predict` gave as a JSON object: a response's `dumps()` or a dict."""
    if hasattr(result, "dumps") and not isinstance(result, dict):
        result = result.dumps()
    if not isinstance(result, dict):
        raise TypeError(
            f"predict must return a dict or a kpl_helper.deploy response, got {type(result).__name__}"
        )
    return result


def make_server(predict, port: int | None = None, host: str = "127.0.0.1"):
    """Return an HTTP server answering GET /health, GET /metrics and POST /predict with `predict`.

    `predict(data: bytes, content_type: str)` returns a response of this module (or a dict);
    raising `BadInput` answers 400 with its message, anything else 500. It listens on the
    Unix socket the platform gives (`KPL_DEPLOY_SOCKET`), else on `port` (`KPL_DEPLOY_PORT`).
    """
    counters = _Counters()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: the gateway reuses its connections
        # buffered: headers and body leave in one send when the request is done (handle_one_request
        # flushes), so a caller wakes once per answer, not once for the headers and again for the body
        wbufsize = -1
        disable_nagle_algorithm = True  # an answer larger than the buffer goes out in several sends

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/health":
                self._answer(200, {"status": "ok"})
            elif self.path == "/metrics":
                self._answer(200, counters.to_json())
            else:
                self._answer(404, {"error": f"no such path: {self.path}"})

        def do_POST(self):  # noqa: N802 - http.server's name
            if self.path != "/predict":
                self._answer(404, {"error": f"no such path: {self.path}"})
                return
            start = time.perf_counter()
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                self.close_connection = True
                self._answer(413, {"error": f"the body is larger than {MAX_BODY_BYTES} bytes"})
                return
            data = self.rfile.read(length)
            content_type = self.headers.get("Content-Type") or "application/octet-stream"
            try:
                status, body = 200, _as_json(predict(data, content_type))
            except BadInput as error:
                status, body = 400, {"error": str(error) or "bad input"}
            except Exception as error:  # the model failed: say why, keep serving
                traceback.print_exc()
                status, body = 500, {"error": f"{type(error).__name__}: {error}"}
            counters.record(status != 200, (time.perf_counter() - start) * 1000)
            self._answer(status, body)

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature
            pass  # one line per request would drown the replica's log

    path = os.environ.get(SOCKET_VARIABLE) if port is None else None
    if path:
        Handler.disable_nagle_algorithm = False  # a TCP option
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # left by a server of this replica that crashed
        server = _UnixServer(path, Handler)
    else:
        port = int(os.environ.get(PORT_VARIABLE) or 8080) if port is None else port
        server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


class _Server(ThreadingHTTPServer):
    """A threading HTTP server whose listen queue holds many callers connecting at once."""

    # the default (5) drops connections of 32 clients starting together: a 1 s SYN retransmit each
    request_queue_size = 128


class _UnixServer(socketserver.ThreadingUnixStreamServer):
    """The same server on a Unix socket."""

    request_queue_size = 128


def address(server) -> str:
    """Return where a server of `make_server` listens: `unix:PATH` or `http://HOST:PORT`."""
    found = server.server_address
    return f"unix:{found}" if isinstance(found, str) else f"http://{found[0]}:{found[1]}"


def serve(predict, port: int | None = None, host: str = "127.0.0.1") -> None:
    """Serve `predict` where the platform says (`KPL_DEPLOY_SOCKET`, else `KPL_DEPLOY_PORT`) until SIGTERM."""
    server = make_server(predict, port, host)
    # shutdown() waits for serve_forever, so it runs on another thread than the handler's
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"serving on {address(server)}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
