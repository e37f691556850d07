"""Where `kpl-lab` commands read and change things: `kpl_lab.client.Client`, on either transport.

Commands call the API through `platform.client` (the one Python API): over HTTP to the hub's
shared platform service (as the user, in their project), or in this process on a home
(`kpl_lab.operations.local.client_on_home`, the same operations the REST handlers run), so
both modes answer alike and print through the same `kpl_lab.text` functions. The methods
below are what a command needs beyond one request: `ServicePlatform` composes `Client` calls
(a version by reference, a folder uploaded as an archive, logs by line, a deployment waited
for, a pipeline run followed), and `LocalPlatform` adds what has no request: the scheduling
round beside no host, files of this machine, pipelines executed here, replicas restarted.
`open_platform` picks the service wherever `Client()` would (a notebook under JupyterHub).
"""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import BadRequest, NotFound, Unavailable
from ..serving.readiness import all_ready
from ..text import sparkline

SUMMARY_WIDTH = 30
FOLLOW_INTERVAL = 0.5  # seconds between looks at what the service runs
ALL_POINTS = 100_000  # the REST API's most points per series: a summary sees every point below it


def open_platform(args) -> LocalPlatform | ServicePlatform:
    """Return the shared service under the hub (unless --home or --database-url names a platform), else this machine's."""
    from ..client import Client, service_configured

    if service_configured() and not (args.home or args.database_url):
        return ServicePlatform(Client(project=args.project))
    from ..operations.local import client_on_home

    client = client_on_home(args.home, args.database_url, project=args.project)
    return LocalPlatform(client, args.database_url)


def _split(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition(":")
    return name, version or None


def _metric_summary(figure: str, series: str, points: list, last, curve: str, count: int) -> dict:
    return {
        "figure": figure,
        "series": series,
        "points": count,
        "last": last,
        "min": min((y for _, y in points), default=None),
        "max": max((y for _, y in points), default=None),
        "curve": curve,
    }


class ServicePlatform:
    """The hub's shared platform service, reached through `Client` as the notebook's user."""

    grace_seconds = 30  # the service's stop grace period is not in the API: wait at least this long

    def __init__(self, client) -> None:
        self.client = client
        self.project = client.project or "(your default project)"

    def close(self) -> None:
        """Nothing to close: each request is its own connection."""

    def reconcile(self) -> None:
        """The service watches its own jobs."""

    # catalog

    def catalog_list(self, kind: str) -> list[dict]:
        """Return the project's datasets, models or algorithms with their versions (oldest first)."""
        listing = getattr(self.client, f"{kind}s")()
        return [{**named, "versions": [{"kind": kind, **v} for v in named["versions"]]} for named in listing]

    def catalog_show(self, kind: str, ref: str) -> tuple[dict, list[str]]:
        """Return one version (the newest for a bare NAME) and every version of its name."""
        if kind == "model" and "@" in ref:  # NAME@ALIAS
            name, _, alias = ref.partition("@")
            found = self.client.model_alias(name, alias)
            return {"kind": kind, **found}, [v["version"] for v in self.client.model(name)["versions"]]
        name, version = _split(ref)
        named = getattr(self.client, kind)(name)
        if not named["versions"]:
            raise NotFound(f"{kind} {name!r} has no versions")
        wanted = version or named["versions"][-1]["version"]
        found = [v for v in named["versions"] if v["version"] == wanted]
        if not found:
            raise NotFound(f"{kind} {name}:{wanted} not found")
        return {"kind": kind, **found[0]}, [v["version"] for v in named["versions"]]

    def catalog_add(self, kind: str, path: str, name: str | None, description: str) -> dict:
        """Upload a file, or a folder packed as a tar, as a new version of an algorithm, dataset or model."""
        source = Path(path)
        if not source.exists():
            raise BadRequest(f"{path}: no such file or folder", field="path")
        with tempfile.TemporaryDirectory() as folder:
            if source.is_dir():
                # an algorithm archive holds its folder (whose name names it); datasets and models their files
                top = source.resolve()
                archive = Path(folder) / f"{top.name}.tar"
                with tarfile.open(archive, "w") as tar:
                    for entry in [top] if kind == "algorithm" else sorted(top.iterdir()):
                        tar.add(entry, arcname=entry.name)
                source = archive
            if kind == "algorithm":
                added = self.client.upload_algorithm(source, name=name, description=description)
            elif kind == "dataset":
                added = self.client.upload_dataset(source, name, description=description)
            else:
                # a packed folder goes as its archive's name, which says it is one
                added = self.client.upload_model(source, name, description=description, filename=source.name)
        return {"kind": kind, **added}

    def catalog_delete(self, kind: str, ref: str) -> list[str]:
        """Delete one version (NAME:VERSION) or every version (NAME); return the refs deleted."""
        name, version = _split(ref)
        return getattr(self.client, f"delete_{kind}")(name, version)["deleted"]

    def algorithm_parameters(self, ref: str) -> tuple[str, dict]:
        """Return an algorithm version's full ref and its parameter.yml values."""
        version, _ = self.catalog_show("algorithm", ref)
        return version["ref"], version.get("parameters") or {}

    def algorithm_detail(self, ref: str) -> dict:
        """Return an algorithm version with its functions' inputs, outputs and resources."""
        return self.client.algorithm_version(*_split(ref))

    # jobs

    def _points(self, job_id: str) -> dict[str, dict[str, list]]:
        return self.client.metrics(job_id, max_points=ALL_POINTS)["figures"]

    def latest_metrics(self, job_id: str) -> dict[str, dict[str, float]]:
        """Return figure -> series -> last value."""
        figures = self._points(job_id)
        return {
            figure: {name: points[-1][1] for name, points in sorted(series.items()) if points}
            for figure, series in sorted(figures.items())
        }

    def metric_summaries(self, job_id: str) -> list[dict]:
        """Return each series' figure, points, last, min, max and sparkline, from its points."""
        # the sparkline from the points the service reads off the same envelopes as a local summary
        curves = self.client.metrics(job_id, max_points=2 * SUMMARY_WIDTH)["figures"]
        summaries = []
        for figure, series in sorted(self._points(job_id).items()):
            for name, points in sorted(series.items()):
                last = points[-1][1] if points else None
                line = sparkline([y for _, y in curves[figure][name]], SUMMARY_WIDTH)
                summaries.append(_metric_summary(figure, name, points, last, line, len(points)))
        return summaries

    def logs(self, job_id: str, follow: bool, worker: int) -> Iterator[str]:
        """Yield a worker's output line by line; with `follow`, until the job ends."""
        chunks = self.client.follow_logs(job_id, worker=worker) if follow else self._all_logs(job_id, worker)
        rest = ""
        for chunk in chunks:
            *lines, rest = (rest + chunk).split("\n")
            yield from lines
        if rest:
            yield rest

    # models

    def set_alias(self, ref: str, alias: str) -> str:
        """Point NAME@ALIAS at a version (the latest for a bare NAME); return the version's ref."""
        if "@" in ref:  # another alias: the version it points at
            ref = self.catalog_show("model", ref)[0]["ref"]
        name, version = _split(ref)
        model = self.client.set_model_alias(name, alias, version)
        return f"{name}:{model['aliases'][alias]}"

    def remove_alias(self, name: str, alias: str) -> str:
        """Remove NAME@ALIAS; return the ref it pointed at."""
        was = self.client.model_alias(name, alias)["ref"]
        self.client.delete_model_alias(name, alias)
        return was

    def model_structure(self, ref: str) -> dict:
        """Return a model version's files with their layers, parameter counts and shapes."""
        version, _ = self.catalog_show("model", ref)
        return self.client.model_structure(_split(version["ref"])[0], version["version"])

    # pipelines

    def start_pipeline(
        self, text: str, path: str, from_node: str | None, fresh: bool, here: bool, backend: str | None = None
    ) -> dict:
        """Start a run in the service (which executes it whether or not this command waits)."""
        if backend:
            raise BadRequest(
                "--backend: the service runs pipelines on its own backend (c.PipelineRunner.backend)",
                field="backend",
            )
        return self.client.run_pipeline(text, path, from_node=from_node, fresh=fresh)

    def follow_pipeline(self, run_id: str, progress, backend: str | None = None) -> dict:
        """Call progress(node, state, message) as the service's run goes; return it finished."""
        seen: dict[str, str] = {}
        while True:
            run = self.client.pipeline_run(run_id)
            for node in run["nodes"]:
                if node["state"] != "pending" and seen.get(node["node"]) != node["state"]:
                    seen[node["node"]] = node["state"]
                    progress(node["node"], node["state"], "")
            if run["state"] != "running":
                return run
            time.sleep(FOLLOW_INTERVAL)

    # deployments

    def reconcile_deployments(self) -> list[str]:
        """The service restarts its own replicas."""
        return []

    def wait_deployment(self, name: str, timeout: float) -> dict:
        """Wait until every replica is ready; raise when one failed or time ran out."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.client.deployment(name)
            states = [r for r in shown["replica_states"] if r["role"] != "retiring"]
            if all_ready(name, states):
                return shown
            if time.monotonic() > deadline:
                raise Unavailable(f"deployment {name!r} was not ready after {timeout:g} s")
            time.sleep(FOLLOW_INTERVAL)

    # experiments

    def tick(self) -> None:
        """The service drives its own jobs and experiments: only wait a little."""
        time.sleep(FOLLOW_INTERVAL)

    def _all_logs(self, job_id: str, worker: int) -> Iterator[str]:
        offset = 0
        while True:
            chunk = self.client.logs(job_id, offset, worker=worker)
            if chunk["text"]:
                yield chunk["text"]
            if chunk["next_offset"] == offset or not chunk["text"]:
                return
            offset = chunk["next_offset"]


class LocalPlatform(ServicePlatform):
    """The platform of a home on this machine, through `Client` on the in-process transport.

    Every answer the API has is the API's (`ServicePlatform`'s methods, the same operations the
    REST handlers run); what is left here has no request: the scheduling round beside no host,
    files and folders of this machine, pipelines executed in this process, replicas restarted.
    """

    def __init__(self, client, database_url: str | None = None) -> None:
        super().__init__(client)
        self.platform = client.transport.platform
        self.project = client.project or self.platform.default_project
        self.database_url = database_url  # given on the command line: a background run gets it too
        self.grace_seconds = self.platform.jobs.grace_seconds

    def close(self) -> None:
        """Close the database."""
        self.client.close()

    def reconcile(self) -> None:
        """Wake the home's host (a server, the hub's service); with none, run one round here.

        A command never schedules beside a host; with none, its round decides with the rules in
        the database (docs/cli.md, "Who starts queued jobs").
        """
        self.client.transport.round()

    def tick(self) -> None:
        """Let jobs and experiments advance (the host's round, or one here when none runs), then wait a moment."""
        self.reconcile()
        time.sleep(FOLLOW_INTERVAL)

    def _version(self, kind: str, row) -> dict:
        from ..catalog import serialize

        return {
            "kind": kind,
            **serialize.version_json(kind, row),
            "path": str(self.platform.catalog.path(row)),
        }

    def catalog_list(self, kind: str) -> list[dict]:
        """Return the project's datasets, models or algorithms with their versions (oldest first)."""
        from ..catalog import serialize

        listing = getattr(self.platform.catalog, f"list_{kind}s")(self.project)
        return [
            {
                **serialize.named_json(kind, named),
                "versions": [self._version(kind, v) for v in named.versions],
            }
            for named in listing
        ]

    def catalog_show(self, kind: str, ref: str) -> tuple[dict, list[str]]:
        """Return one version (the newest for a bare NAME) and every version of its name."""
        row = getattr(self.platform.catalog, f"get_{kind}")(self.project, ref)
        return self._version(kind, row), [v.version for v in getattr(row, kind).versions]

    def catalog_add(self, kind: str, path: str, name: str | None, description: str) -> dict:
        """Add a version from a file or folder on this machine."""
        catalog = self.platform.catalog
        if kind == "algorithm":
            row = catalog.add_algorithm(self.project, path, name=name, description=description)
        else:
            row = getattr(catalog, f"add_{kind}")(self.project, name, path, description=description)
        return self._version(kind, row)

    def algorithm_parameters(self, ref: str) -> tuple[str, dict]:
        """Return an algorithm version's full ref and its parameter.yml values."""
        version = self.platform.catalog.get_algorithm(self.project, ref)
        return version.ref, version.parameters or {}

    def latest_metrics(self, job_id: str) -> dict[str, dict[str, float]]:
        """Return figure -> series -> last value."""
        latest = self.platform.jobs.latest_metrics(self.project, job_id)
        return {
            figure: {name: value for name, (_, value) in series.items()} for figure, series in latest.items()
        }

    def metric_summaries(self, job_id: str) -> list[dict]:
        """Return each series' figure, points, last, min, max and sparkline, read from the job's envelopes."""
        from ..engine import envelope

        job = self.platform.jobs.get(self.project, job_id)
        latest = self.latest_metrics(job_id)
        summaries = []
        for title, fields in sorted((job.figures or {}).items()):
            for series, curve in sorted((fields.get("envelopes") or {}).items()):
                points = [(b[0], b[1]) for b in curve.get("buckets") or []]
                points += [(b[2], b[3]) for b in curve.get("buckets") or []]
                line = sparkline([y for _, y in envelope.points(curve, 2 * SUMMARY_WIDTH)], SUMMARY_WIDTH)
                last = latest.get(title, {}).get(series)
                summaries.append(_metric_summary(title, series, points, last, line, curve.get("count", 0)))
        return summaries

    def logs(self, job_id: str, follow: bool, worker: int) -> Iterator[str]:
        """Yield a worker's output line by line; with `follow`, until the job ends."""
        return self.platform.jobs.follow_logs(self.project, job_id, follow=follow, worker=worker)

    def _runner(self, backend: str | None = None):
        from ..pipelines.runner import PipelineRunner

        return PipelineRunner(self.platform, **({"backend": backend} if backend else {}))

    def start_pipeline(
        self, text: str, path: str, from_node: str | None, fresh: bool, here: bool, backend: str | None = None
    ) -> dict:
        """Record a run; `here`: `follow_pipeline` runs it in this process, else a process of its own does."""
        run_id = self._runner().create(self.project, text, path, from_node=from_node, fresh=fresh)
        if not here:
            self._detach(run_id, backend)
        return self.client.pipeline_run(run_id)

    def _detach(self, run_id: str, backend: str | None = None) -> None:
        """Execute the recorded run in a process of its own that outlives this command."""
        import subprocess
        import sys

        platform = self.platform
        command = [sys.executable, "-m", "kpl_lab.cli", "--home", platform.home, "--project", self.project]
        if self.database_url:
            command += ["--database-url", self.database_url]
        on = ["--backend", backend] if backend else []
        log = platform.storage.root / "pipelines" / self.project / "runs" / f"{run_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # a shell that starts the run in the background and ends at once: the run is nobody's child here
            subprocess.run(  # noqa: S603 - our own interpreter and module
                ["/bin/sh", "-c", '"$@" &', "sh", *command, "pipeline", "execute", *on, run_id],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                check=True,
            )

    def follow_pipeline(self, run_id: str, progress, backend: str | None = None) -> dict:
        """Execute a recorded run here, calling progress(node, state, message); return it finished."""
        from ..api.pipelines import run_body

        run = self._runner(backend).execute(self.project, run_id, progress)
        return run_body(run).model_dump(mode="json")

    def reconcile_deployments(self) -> list[str]:
        """Restart replicas whose supervisors are gone (a reboot); return their ids."""
        return self.platform.deployments.reconcile()

    def wait_deployment(self, name: str, timeout: float) -> dict:
        """Wait until every replica is ready; raise when one failed or time ran out."""
        self.platform.deployments.wait(self.project, name, timeout)
        return self.client.deployment(name)
