"""Hub mode: the user's server forwards `/kpl/api/*` to the shared platform service as its user.

Under JupyterHub (`JUPYTERHUB_SERVICE_PREFIX` set) a user's server opens no platform of its
own: one scheduler, the service `kpl`, serves everyone. Requests of the panels, magics and
widgets to `/user/<name>/kpl/api/...` are checked by the server's own hub authentication,
then sent on to `<service>/api/...` with the server's token, which the hub issued to this
user with the scope `access:services!service=kpl` (`c.Spawner.server_token_scopes`). Bodies
stream both ways, so uploads and long polls are not held in memory. A request naming no
`?project=` gets the notebook's project (`KPL_PROJECT`, set by the spawner).
"""

from __future__ import annotations

import asyncio
import os

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from tornado import httpclient, web
from tornado.httputil import url_concat
from tornado.queues import Queue
from traitlets import Float, Unicode, default

from .app import KPLLab
from .base import FORWARDED_API_BASE
from .routes import API_PREFIX

# hop-by-hop and per-connection headers are not forwarded
_SKIP_REQUEST = {"host", "authorization", "cookie", "content-length", "connection", "transfer-encoding"}
_SKIP_REQUEST.add(FORWARDED_API_BASE.lower())  # set by the forwarder, never by the caller
_SKIP_RESPONSE = {"content-length", "connection", "transfer-encoding", "server", "date", "set-cookie"}


class ForwardHandler(ExtensionHandlerMixin, APIHandler):
    """Send one API request to the service as this server's user and stream the answer back."""

    _body: Queue | None = None

    @property
    def app(self) -> ForwardApp:
        """Return the extension app."""
        return self.extensionapp

    async def prepare(self) -> None:
        """Authenticate, then start the upstream request so the body streams into it."""
        await super().prepare()
        if not self.current_user:
            raise web.HTTPError(403)
        self._body = Queue(maxsize=8)
        self._upstream = asyncio.ensure_future(self._forward())

    async def data_received(self, chunk: bytes) -> None:
        """Pass a piece of the request body on (waits while the service is slower)."""
        await self._put(chunk)

    async def _put(self, item: bytes | None) -> None:
        """Queue a piece of the body, unless the upstream request ended (then nobody reads it)."""
        if self._upstream.done():
            return
        put = asyncio.ensure_future(self._body.put(item))
        await asyncio.wait({put, self._upstream}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()

    def upstream_url(self) -> str:
        """Return the service URL of this request, with the notebook's project when none is named."""
        # the raw path after the prefix's segments, so escapes (a '/' in a name) stay as they came
        skip = len(url_path_join(self.base_url, API_PREFIX).split("/"))
        rest = "/".join(self.request.path.split("/")[skip:])
        url = url_path_join(self.app.service_url, "api", rest)
        query = self.request.query
        if query:
            url = f"{url}?{query}"
        project = os.environ.get("KPL_PROJECT")
        if project and "project" not in self.request.query_arguments:
            url = url_concat(url, {"project": project})
        return url

    async def _produce(self, write) -> None:
        while True:
            chunk = await self._body.get()
            if chunk is None:
                return
            await write(chunk)

    async def _forward(self) -> None:
        headers = {k: v for k, v in self.request.headers.get_all() if k.lower() not in _SKIP_REQUEST}
        headers["Authorization"] = f"token {self.app.token}"
        # the media URLs of the answer then lead back here, where the browser's cookie is valid
        headers[FORWARDED_API_BASE] = url_path_join(self.base_url, API_PREFIX)
        has_body = self.request.method in {"POST", "PUT", "PATCH"}
        if has_body and "Content-Length" in self.request.headers:
            headers["Content-Length"] = self.request.headers["Content-Length"]
        request = httpclient.HTTPRequest(
            self.upstream_url(),
            method=self.request.method,
            headers=headers,
            body_producer=self._produce if has_body else None,
            streaming_callback=self._pass_chunk,
            header_callback=self._pass_header,
            connect_timeout=self.app.connect_timeout_seconds,
            request_timeout=self.app.timeout_seconds,
            follow_redirects=False,
            allow_nonstandard_methods=True,
        )
        self._status = 502
        where = self.app.service_url
        try:
            await httpclient.AsyncHTTPClient().fetch(request, raise_error=False)
        except httpclient.HTTPClientError as error:  # 599: no answer in time (connection or request)
            raise web.HTTPError(504, f"the platform service at {where} did not answer: {error}") from None
        except OSError as error:
            raise web.HTTPError(502, f"the platform service at {where} is unreachable: {error}") from None

    def _pass_header(self, line: str) -> None:
        line = line.strip()
        if line.startswith("HTTP/"):
            self._status = int(line.split(" ", 2)[1])
            self.clear_header("Content-Type")
            return
        if ":" not in line:
            return
        name, value = line.split(":", 1)
        if name.strip().lower() not in _SKIP_RESPONSE:
            self.set_header(name.strip(), value.strip())

    def _pass_chunk(self, chunk: bytes) -> None:
        if not self._headers_written:
            self.set_status(self._status)
        self.write(chunk)
        self.flush()

    async def _answer(self, *args: str) -> None:
        await self._put(None)
        try:
            await self._upstream
        except web.HTTPError:
            if not self._headers_written:
                raise
            # the answer had begun: cut it short so the client sees a broken, not a complete, answer
            self.log.warning(
                "kpl forward: %s %s: the service stopped mid-answer", self.request.method, self.request.path
            )
            self.request.connection.close()
            return
        if not self._headers_written:
            self.set_status(self._status)
        content_type = self._headers.get("Content-Type")
        self.finish(set_content_type=content_type or "application/json")

    get = post = put = patch = delete = web.authenticated(_answer)


ForwardHandler = web.stream_request_body(ForwardHandler)


class ForwardApp(KPLLab):
    """The kpl_lab extension in hub mode: no platform here, the API forwarded to the service."""

    service_url = Unicode(help="Base URL of the platform service; default $KPL_SERVICE_URL.").tag(config=True)
    token = Unicode(help="The token sent to the service; default $JUPYTERHUB_API_TOKEN.").tag(config=True)
    timeout_seconds = Float(
        3600.0, help="Seconds a forwarded request may take in all (uploads and long polls are long)."
    ).tag(config=True)
    connect_timeout_seconds = Float(10.0, help="Seconds to wait for a connection to the service.").tag(
        config=True
    )

    @default("service_url")
    def _default_service_url(self) -> str:
        return os.environ.get("KPL_SERVICE_URL", "")

    @default("token")
    def _default_token(self) -> str:
        return os.environ.get("JUPYTERHUB_API_TOKEN", "")

    def initialize_settings(self) -> None:
        """Check the service URL and token; publish the API URL to kernels."""
        if not self.service_url or not self.token:
            raise RuntimeError(
                "kpl_lab in hub mode needs KPL_SERVICE_URL and JUPYTERHUB_API_TOKEN in the environment"
            )
        self._saved_environ = {k: os.environ.get(k) for k in ("KPL_API_URL", "KPL_API_TOKEN")}
        self.publish_api_url()

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        """Publish the URL again once the server listens (no platform here: no token for a gateway)."""
        self.publish_api_url()

    def initialize_handlers(self) -> None:
        """Forward everything under /kpl/api/."""
        self.handlers.append((f"{API_PREFIX}/(.*)", ForwardHandler))

    async def stop_extension(self) -> None:
        """Give the environment back."""
        for key, value in self._saved_environ.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
