"""The platform API run once as the hub-managed service `kpl`, with hub OAuth and project isolation.

The REST handlers are the server extension's own (`kpl_lab.server_ext.routes.ROUTES`), served
under `/services/kpl/api/`. The caller is identified by hub OAuth (browser cookie) or an
`Authorization: token` header (a user's server forwarding `/kpl/api/*`); their admin flag and
groups come from the hub API. Projects are groups: a member sees their groups' projects, another
project answers 404; an admin sees every project. Quotas come from the group properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import secrets
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from tornado import web
from tornado.httpserver import HTTPServer
from traitlets import Float, Integer, Unicode
from traitlets.config import Application

if TYPE_CHECKING:
    from .identity import KPLUser

EXTENSION_NAME = "kpl_lab"  # the handlers find the app in settings under this name
HUB_SECONDS = 60.0  # the longest a round waits for the hub's groups
STARTING_RETRY_SECONDS = 2


class Starting(web.RequestHandler):
    """Answer while the service loads: 503 under its prefix (try again), 404 elsewhere (as when it runs).

    The hub counts any answer below 500 at the service's URL as up, so it goes on at once
    instead of waiting out its service timeout on a slow machine.
    """

    def initialize(self, prefix: str) -> None:
        self.prefix = prefix

    def prepare(self) -> None:
        """Answer every method the same way."""
        self.set_header("Content-Type", "application/json")
        if not self.request.path.startswith(self.prefix):
            self.set_status(404)
            self.finish(json.dumps({"message": "not found"}))
            return
        self.set_status(503)
        self.set_header("Retry-After", str(STARTING_RETRY_SECONDS))
        self.finish(json.dumps({"message": "the platform service is starting; try again in a few seconds"}))


class KPLService(Application):
    """Serve the KPL Lab REST API and the admin page as a JupyterHub service.

    The platform's own settings are `c.Platform.*`, `c.Ledger.*` and `c.JobService.*`.
    """

    name = "kpl-lab-service"
    description = "KPL Lab platform API as a JupyterHub-managed service"

    max_upload_bytes = Integer(16 << 30, help="Largest upload in bytes.").tag(config=True)
    poll_seconds = Float(2.0, help="Seconds between rounds of job events, scheduling and quota refresh.").tag(
        config=True
    )
    worker_threads = Integer(4, help="Threads for database and file work.").tag(config=True)
    import_workers = Integer(
        2, help="Dataset imports that run at once, on threads of their own; more wait queued."
    ).tag(config=True)
    import_queue = Integer(
        32, help="Dataset imports that may wait for a worker; further uploads are refused (503)."
    ).tag(config=True)
    service_url = Unicode(help="URL the service listens on; default $JUPYTERHUB_SERVICE_URL.").tag(
        config=True
    )
    prefix = Unicode(help="URL prefix; default $JUPYTERHUB_SERVICE_PREFIX or /services/kpl/.").tag(
        config=True
    )
    hub_api_url = Unicode(help="Hub API URL; default $JUPYTERHUB_API_URL.").tag(config=True)
    api_token = Unicode(help="The service's hub API token; default $JUPYTERHUB_API_TOKEN.").tag(config=True)

    aliases = {"config": "KPLService.config_file"}
    config_file = Unicode("", help="A Python config file (c.KPLService...).").tag(config=True)

    def _env(self, name: str, fallback: str = "") -> str:
        return os.environ.get(name, fallback)

    # what the reused handlers ask of "the app"

    def is_admin(self, user: KPLUser | None) -> bool:
        """Say whether the caller is a hub admin."""
        return bool(getattr(user, "admin", False))

    async def project_members(self, project: str) -> list[str] | None:
        """Return the hub users of a project's group (annotators and reviewers are chosen from them)."""
        group = await self.directory.request(f"groups/{project}")
        return sorted((group or {}).get("users") or [])

    def may_use_project(self, user: KPLUser, project: str) -> bool:
        """Let admins use every project and members their groups; any other project does not exist."""
        from . import access

        return access.may_use_project(user, project, self.platform.default_project)

    @functools.cached_property
    def gateway(self):
        """Return the gateway that forwards predictions to deployments' replicas."""
        from ..serving.gateway import Gateway

        return Gateway(self.platform.deployments, self.pool)

    def read_environment(self) -> None:
        """Take the URLs and the token the hub passes in the environment, unless configured."""
        self.prefix = self.prefix or self._env("JUPYTERHUB_SERVICE_PREFIX", "/services/kpl/")
        self.service_url = self.service_url or self._env("JUPYTERHUB_SERVICE_URL")
        self.hub_api_url = self.hub_api_url or self._env("JUPYTERHUB_API_URL")
        self.api_token = self.api_token or self._env("JUPYTERHUB_API_TOKEN")
        for trait in ("service_url", "hub_api_url", "api_token"):
            if not getattr(self, trait):
                raise SystemExit(f"kpl service: {trait} is not set (run me as a JupyterHub-managed service)")

    def setup(self) -> None:
        """Open the platform and the hub directory (the heavy imports happen here, not at import)."""
        from ..monitoring.logs import PlatformLogs
        from ..monitoring.monitor import Monitor
        from ..platform import Platform, with_moved_settings
        from ..server_ext.imports import ImportQueue
        from .directory import HubDirectory

        self.read_environment()
        self.platform = Platform(config=with_moved_settings(self.config, "KPLService", self.log))
        self.pool = ThreadPoolExecutor(max_workers=self.worker_threads, thread_name_prefix="kpl-service")
        self.imports = ImportQueue(self.import_workers, self.import_queue)
        self.directory = HubDirectory(self.hub_api_url, self.api_token)
        self.monitor = Monitor(self.platform, imports=self.imports)
        self.logs = PlatformLogs(self.platform)

    def http_server(self, app: web.Application) -> HTTPServer:
        """Return the service's HTTP server: callers' addresses from the proxy's X-Forwarded-For, as the hub's."""
        return HTTPServer(app, max_body_size=self.max_upload_bytes + 1, xheaders=True)

    def web_app(self) -> web.Application:
        """Return the tornado application: the REST API under <prefix>api/, OAuth callback, admin page."""
        from jupyter_server.auth import AllowAllAuthorizer
        from jupyterhub.utils import url_path_join

        from ..server_ext.routes import API_PREFIX, ROUTES, tornado_pattern
        from .admin import admin_handlers
        from .identity import ServiceIdentityProvider

        identity = ServiceIdentityProvider(config=self.config)
        identity.directory = self.directory
        prefix = self.prefix
        kwargs = {"name": EXTENSION_NAME}
        handlers = [
            (url_path_join(prefix, "api") + tornado_pattern(path)[len(API_PREFIX) :], handler, kwargs)
            for path, handler, _ in ROUTES
        ]
        handlers += [(url_path_join(prefix, p), h, *a) for p, h, *a in identity.get_handlers()]
        handlers += admin_handlers(prefix, kwargs)
        settings = {
            EXTENSION_NAME: self,
            f"{EXTENSION_NAME}_config": self.config,
            "identity_provider": identity,
            "authorizer": AllowAllAuthorizer(config=self.config, identity_provider=identity),
            "base_url": prefix,
            "kpl_api_base": url_path_join(prefix, "api"),
            "static_url_prefix": url_path_join(prefix, "static/"),
            "allow_remote_access": True,
            "headers": {},
            # checked in prepare(), once the caller is known (token callers need none); tornado would check too early
            "xsrf_cookies": False,
            "cookie_secret": secrets.token_bytes(32),
            "serverapp": None,
            "config": self.config,
            "login_url": identity.hub_auth.login_url,
        }
        return web.Application(handlers, **settings)

    async def refresh_quotas(self) -> None:
        """Load the hub groups' quota properties that changed into the platform's rules."""
        for refusal in await self.directory.load_quotas(self.platform.jobs.ledger.rules):
            self.log.warning("kpl service: a group's quota is kept as it was: %s", refusal)

    def _flush_gateway(self) -> None:
        if "gateway" in self.__dict__:  # the requests predicted since the last round
            self.gateway.flush_metrics()

    def request_stop(self) -> None:
        """Make `serve` stop, as SIGTERM does (from any thread)."""
        self._loop.call_soon_threadsafe(self._stop.set)

    def rounds(self, loop: asyncio.AbstractEventLoop):
        """Return the platform's rounds as this service runs them: the hub's quotas first, then its metrics and monitoring.

        A round runs on its own thread; the quotas are read on `loop`, the service's.
        """
        from ..rounds import Rounds

        return Rounds(
            self.platform,
            first=[lambda: asyncio.run_coroutine_threadsafe(self.refresh_quotas(), loop).result(HUB_SECONDS)],
            last=[self._flush_gateway, *self.monitor.steps()],
            log=self.log,
        )

    async def serve(self) -> None:
        """Listen on the service URL at once, load the platform, then serve it until stopped."""

        started = time.monotonic()
        self.read_environment()
        loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._loop = loop
        for signum in (signal.SIGTERM, signal.SIGINT):  # the hub stops its services with SIGTERM
            loop.add_signal_handler(signum, stop.set)
        url = urlparse(self.service_url)
        # listening before the slow part (imports, the database): the hub sees the service up in a
        # second, busy machine or not; what comes meanwhile is told to try again
        starting = web.Application([(r".*", Starting, {"prefix": self.prefix})])
        server = self.http_server(starting)
        server.listen(url.port or 80, url.hostname or "127.0.0.1")
        self.log.info("kpl service: listening on %s%s, starting", self.service_url.rstrip("/"), self.prefix)
        try:
            await loop.run_in_executor(None, self.setup)
        except BaseException:
            server.stop()
            raise
        rounds = None
        try:
            # this service hosts the platform: its settings, and the hub's groups' quotas, are the rules
            from ..monitoring.logs import LOGGERS

            self.logs.start("service", (*LOGGERS, self.log.name))
            await loop.run_in_executor(self.pool, self.platform.jobs.load_config)
            await self.refresh_quotas()
            outcome = await loop.run_in_executor(self.pool, self.platform.jobs.reconcile)
            if outcome:
                self.log.info("kpl service: jobs found running at start: %s", outcome)
            server.request_callback = self.web_app()  # the next request is served by the platform
            self.log.info("kpl service: ready in %.1f s", time.monotonic() - started)
            rounds = self.rounds(loop)
            rounds.start(self.poll_seconds)
            await stop.wait()
            self.log.info("kpl service: stopping")
        finally:
            if rounds is not None:
                rounds.stop()
            server.stop()
            self.imports.shutdown()
            self.pool.shutdown(wait=True, cancel_futures=True)
            if "gateway" in self.__dict__:
                self.gateway.close()  # writes the requests counted since the last round
            self.monitor.close()
            self.platform.close()
            self.logs.stop()


def main(argv: list[str] | None = None) -> None:
    """Run the service (JupyterHub starts it with its environment)."""
    service = KPLService()
    service.initialize(argv if argv is not None else sys.argv[1:])
    if service.config_file:
        service.load_config_file(service.config_file)
    service.log_level = "INFO"
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(service.serve())


if __name__ == "__main__":
    main()
