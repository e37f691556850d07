"""The KPL Lab jupyter-server extension app: configuration, the platform, background work, routes."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join
from traitlets import Float, Integer, List, Unicode

from ..monitoring.logs import LOGGERS, PlatformLogs
from ..monitoring.monitor import Monitor
from ..platform import Platform, with_moved_settings
from ..rounds import Rounds
from .imports import ImportQueue
from .routes import API_PREFIX, handlers

if TYPE_CHECKING:
    from ..serving.gateway import Gateway

GiB = 1 << 30


class KPLLab(ExtensionApp):
    """Serve the KPL Lab REST API inside a Jupyter server.

    The platform's own settings are `c.Platform.*`, `c.Ledger.*` and `c.JobService.*`.
    """

    name = "kpl_lab"
    description = "KPL Lab REST API: datasets, algorithms, jobs, models, devices"
    load_other_extensions = True

    projects = List(
        Unicode(), help="Projects users of this server may name with ?project=; empty: any project."
    ).tag(config=True)
    max_upload_bytes = Integer(16 * GiB, help="Largest upload (dataset or algorithm archive) in bytes.").tag(
        config=True
    )
    poll_seconds = Float(
        2.0, help="Seconds between background rounds of event ingestion and scheduling."
    ).tag(config=True)
    worker_threads = Integer(4, help="Threads that run database and file work off the event loop.").tag(
        config=True
    )
    import_workers = Integer(
        2, help="Dataset imports that run at once, on threads of their own; more wait queued."
    ).tag(config=True)
    import_queue = Integer(
        32, help="Dataset imports that may wait for a worker; further uploads are refused (503)."
    ).tag(config=True)

    platform: Platform
    pool: ThreadPoolExecutor
    imports: ImportQueue

    def may_use_project(self, user: object, project: str) -> bool:
        """Say whether the user may use a project (the hub will decide per user later)."""
        return not self.projects or project in self.projects

    def is_admin(self, user: object) -> bool:
        """Say whether the user administers the platform: a single-user server's owner does."""
        return True

    async def project_members(self, project: str) -> list[str] | None:
        """Return the people of a project; None: a single-user server keeps no directory of users."""
        return None

    def initialize_settings(self) -> None:
        """Open the platform, publish the API URL and token to kernels, start background work."""
        self.platform = Platform(config=with_moved_settings(self.config, "KPLLab", self.log))
        self.pool = ThreadPoolExecutor(max_workers=self.worker_threads, thread_name_prefix="kpl-api")
        self.imports = ImportQueue(self.import_workers, self.import_queue)
        self._saved_environ = {k: os.environ.get(k) for k in ("KPL_API_URL", "KPL_API_TOKEN")}
        self.publish_api_url()
        self.platform.jobs.load_config()  # this server hosts the platform: its settings are the rules
        # before the first request: a job submitted meanwhile would look "never started" to it
        outcome = self.platform.jobs.reconcile()
        if outcome:
            self.log.info("kpl_lab: jobs found running at start: %s", outcome)
        restarted = self.platform.deployments.reconcile()
        if restarted:
            self.log.info("kpl_lab: replicas restarted at start (their supervisors were gone): %s", restarted)
        self.monitor = Monitor(self.platform, imports=self.imports)
        self.logs = PlatformLogs(self.platform)
        self.rounds = Rounds(self.platform, last=[self._flush_gateway, *self.monitor.steps()], log=self.log)
        self.rounds.start(self.poll_seconds)  # from here on this server schedules its home

    def publish_api_url(self) -> None:
        """Tell kernels started by this server where the API is (they inherit the environment)."""
        os.environ["KPL_API_URL"] = url_path_join(self.serverapp.connection_url, API_PREFIX.strip("/"))
        token = self.serverapp.identity_provider.token
        if token:
            os.environ["KPL_API_TOKEN"] = token

    @functools.cached_property
    def gateway(self) -> Gateway:
        """Return the gateway that forwards predictions to deployments' replicas."""
        from ..serving.gateway import Gateway

        return Gateway(self.platform.deployments, self.pool)

    def initialize_handlers(self) -> None:
        """Register the REST API handlers under /kpl/api/."""
        self.handlers.extend(handlers())

    async def _start_jupyter_server_extension(self, serverapp) -> None:
        """Publish the URL again once the server listens (its port may have moved); register the token."""
        self.logs.start("server", (*LOGGERS, self.serverapp.log.name))
        self.publish_api_url()
        self._registered = None
        token = self.serverapp.identity_provider.token
        if token and self.platform.deployments.gateway_process:  # the gateway process takes it too
            from ..serving.gateway_process import register_server

            try:
                self._registered = register_server(self.platform.home, token, list(self.projects))
            except OSError as error:  # a home this account may not write: keys still work there
                self.log.warning("kpl_lab: the gateway process will not take this server's token: %s", error)

    def _flush_gateway(self) -> None:
        if "gateway" in self.__dict__:  # the requests predicted since the last round, off the request path
            self.gateway.flush_metrics()

    async def stop_extension(self) -> None:
        """Stop background work and release the database; running jobs keep running."""
        self.rounds.stop()
        self.imports.shutdown()
        if getattr(self, "_registered", None) is not None:
            self._registered.unlink(missing_ok=True)
        if "gateway" in self.__dict__:
            self.gateway.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.platform.experiments.release()  # the next server drives them at once, not after the lease
        self.monitor.close()
        self.platform.close()
        self.logs.stop()
        for key, value in self._saved_environ.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
