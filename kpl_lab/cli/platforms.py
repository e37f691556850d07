"""Where `kpl-lab` commands read and change things: the platform on this machine, or the shared service.

Every command is written against the methods below and sees the REST API's JSON shapes, so
both answer alike and print through the same `kpl_lab.text` functions. `LocalPlatform` opens
the database and files under the home folder; `ServicePlatform` goes through
`kpl_lab.client.Client` to the hub's shared platform service, as the user, in their project.
`open_platform` picks the service wherever `Client()` would (a notebook under JupyterHub).
New command modules (pipeline, deployment, experiment ...) add their methods to both classes.
"""

from __future__ import annotations

import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..catalog import serialize
from ..errors import BadRequest, ModelFailed, NotFound, Unavailable
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
    from ..platform import Platform

    settings = {"home": args.home, "database_url": args.database_url}
    platform = Platform(**{name: value for name, value in settings.items() if value})
    return LocalPlatform(platform, args.project, args.database_url)


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


def _key(row) -> dict:
    """Return a deployment key row as the REST lists it."""
    from ..catalog.serialize import utc

    return {"id": row.id, "prefix": row.prefix, "user": row.user, "created": utc(row.created).isoformat()}


class LocalPlatform:
    """The platform whose database and files this process opens itself."""

    def __init__(self, platform, project: str | None, database_url: str | None = None) -> None:
        self.platform = platform
        self.project = project or platform.default_project
        self.database_url = database_url  # given on the command line: a background run gets it too
        self.grace_seconds = platform.jobs.grace_seconds

    def close(self) -> None:
        """Close the database."""
        self.platform.close()

    def reconcile(self) -> None:
        """Wake the home's host (a server, the hub's service); with none, run one round here.

        A command never schedules beside a host; with none, its round decides with the rules in
        the database (docs/cli.md, "Who starts queued jobs").
        """
        from ..rounds import Rounds

        Rounds(self.platform).run_unless_hosted()

    # catalog

    def _version(self, kind: str, row) -> dict:
        return {
            "kind": kind,
            **serialize.version_json(kind, row),
            "path": str(self.platform.catalog.path(row)),
        }

    def catalog_list(self, kind: str) -> list[dict]:
        """Return the project's datasets, models or algorithms with their versions (oldest first)."""
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

    def catalog_delete(self, kind: str, ref: str) -> list[str]:
        """Delete one version (NAME:VERSION) or every version (NAME); return the refs deleted."""
        return list(getattr(self.platform.catalog, f"delete_{kind}")(self.project, ref))

    def algorithm_parameters(self, ref: str) -> tuple[str, dict]:
        """Return an algorithm version's full ref and its parameter.yml values."""
        version = self.platform.catalog.get_algorithm(self.project, ref)
        return version.ref, version.parameters or {}

    def algorithm_detail(self, ref: str) -> dict:
        """Return an algorithm version with its functions' inputs, outputs and resources."""
        row = self.platform.catalog.get_algorithm(self.project, ref)
        return serialize.algorithm_detail_model(
            row,
            self.platform.catalog.read_algorithm(row),
            image_used=self.platform.jobs.executor.uses_images,
        ).model_dump(mode="json")

    # jobs

    def _job(self, job, queue=None) -> dict:
        fraction, eta = self.platform.jobs.progress(job)
        if queue is None and job.state == "queued":
            queue = self.platform.jobs.queue_reason(job)
        return serialize.job_json(job, fraction, eta, queue)

    def submit(self, request: dict) -> dict:
        """Submit a job (a JobRequest's fields); return it."""
        from pydantic import ValidationError

        from ..api.jobs import JobRequest
        from ..errors import validation_error

        try:
            model = JobRequest(project=self.project, **request)
        except ValidationError as exc:
            raise validation_error(exc) from None
        return self._job(self.platform.jobs.submit(model))

    def rerun(self, job_id: str) -> dict:
        """Run a job again exactly; return the new job."""
        return self._job(self.platform.jobs.rerun(self.project, job_id))

    def copy(self, job_id: str, parameters: dict | None, resources: dict | None) -> dict:
        """Run a job again with other parameters or resources; return the new job."""
        job = self.platform.jobs.copy(self.project, job_id, parameters=parameters, resources=resources)
        return self._job(job)

    def resume(self, job_id: str, parameters: dict | None) -> dict:
        """Continue a job from the model it produced; return the new job."""
        return self._job(self.platform.jobs.resume(self.project, job_id, parameters=parameters))

    def job(self, job_id: str) -> dict:
        """Return one job with its progress and time left."""
        return self._job(self.platform.jobs.get(self.project, job_id))

    def jobs(self, state: str | None) -> list[dict]:
        """Return the project's jobs, newest first."""
        listed = self.platform.jobs.list(self.project, state=state)
        queue = (
            self.platform.jobs.queue_reasons(self.project) if any(j.state == "queued" for j in listed) else {}
        )
        return [self._job(job, queue.get(job.id)) for job in listed]

    def stop(self, job_id: str) -> dict:
        """Ask a job to stop; return it."""
        return self._job(self.platform.jobs.stop(self.project, job_id))

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

    def usage(self, job_id: str) -> dict:
        """Return a job's resource use as the REST API answers it: latest, peak_memory_mb, history."""
        return serialize.usage_model(self.platform.jobs.usage(self.project, job_id)).model_dump(mode="json")

    def quota(self) -> dict:
        """Return the project's quota as the REST API answers it."""
        from ..api.quotas import Quota, QuotaLimits
        from ..catalog.rules import QUOTA

        found = self.platform.jobs.ledger.rules.read(QUOTA, self.project, {})
        return Quota(project=self.project, quota=QuotaLimits(**found)).model_dump(mode="json")

    def set_quota(self, quota: dict) -> dict:
        """Replace the project's quota (whoever opens the home administers it)."""
        from ..api.quotas import QuotaRequest
        from ..catalog.rules import QUOTA

        checked = QuotaRequest.model_validate(quota).model_dump(exclude_none=True)
        self.platform.jobs.ledger.rules.set(QUOTA, self.project, checked)
        return self.quota()

    def metrics(self, job_id: str, max_points: int) -> dict:
        """Return a job's metrics as the REST API answers them."""
        job = self.platform.jobs.get(self.project, job_id)
        return serialize.metrics_json(
            job, self.platform.jobs.metrics(self.project, job_id, max_points), max_points
        )

    def logs(self, job_id: str, follow: bool, worker: int) -> Iterator[str]:
        """Yield a worker's output line by line; with `follow`, until the job ends."""
        return self.platform.jobs.follow_logs(self.project, job_id, follow=follow, worker=worker)

    # models

    def set_alias(self, ref: str, alias: str) -> str:
        """Point NAME@ALIAS at a version (the latest for a bare NAME); return the version's ref."""
        return self.platform.catalog.set_model_alias(self.project, ref, alias).ref

    def remove_alias(self, name: str, alias: str) -> str:
        """Remove NAME@ALIAS; return the ref it pointed at."""
        return self.platform.catalog.remove_model_alias(self.project, name, alias)

    def model_structure(self, ref: str) -> dict:
        """Return a model version's files with their layers, parameter counts and shapes."""
        from ..api.models import ModelStructure

        structure = self.platform.catalog.model_structure(self.project, ref)
        return ModelStructure.model_validate(structure).model_dump(mode="json")

    def compare(self, job_ids: list[str]) -> dict:
        """Return jobs side by side as the REST API answers them."""
        from ..experiments.compare import compare_jobs

        return compare_jobs(self.platform, self.project, job_ids).model_dump(mode="json")

    # pipelines

    def validate_pipeline(self, text: str) -> dict:
        """Return each node's schemas and every problem of a pipeline file's text."""
        from ..pipelines.validate import PlatformCatalog, check

        return check(text, PlatformCatalog(self.platform, self.project))

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
        return self.pipeline_run(run_id)

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

    def pipeline_runs(self, limit: int) -> list[dict]:
        """Return the project's pipeline runs, newest first."""
        from ..api.pipelines import run_body

        return [run_body(r).model_dump(mode="json") for r in self._runner().list(self.project, limit)]

    def pipeline_run(self, run_id: str) -> dict:
        """Return one pipeline run with its nodes."""
        from ..api.pipelines import run_body

        return run_body(self._runner().get(self.project, run_id)).model_dump(mode="json")

    def stop_pipeline(self, run_id: str) -> dict:
        """Stop a pipeline run; return it."""
        from ..api.pipelines import run_body

        return run_body(self._runner().stop(self.project, run_id)).model_dump(mode="json")

    # deployments

    def reconcile_deployments(self) -> list[str]:
        """Restart replicas whose supervisors are gone (a reboot); return their ids."""
        return self.platform.deployments.reconcile()

    def _deployment(self, row, with_metrics: bool = False) -> dict:
        from ..serving.describe import deployment_model

        return deployment_model(self.platform.deployments, row, with_metrics).model_dump(mode="json")

    def deployments(self) -> list[dict]:
        """Return the project's deployments with their state and replicas."""
        return [self._deployment(row) for row in self.platform.deployments.list(self.project)]

    def deployment(self, name: str) -> dict:
        """Return one deployment with its replicas and request metrics per model version."""
        return self._deployment(self.platform.deployments.get(self.project, name), with_metrics=True)

    def deploy(self, name: str, model: str, replicas: int, algorithm: str | None) -> dict:
        """Deploy a model version; its replicas start at once."""
        return self._deployment(
            self.platform.deployments.create(self.project, name, model, replicas, algorithm)
        )

    def canary(self, name: str, request: dict) -> dict:
        """Serve a canary version (a CanaryRequest's fields) to a percent of the requests."""
        service = self.platform.deployments
        return self._deployment(
            service.canary(
                self.project,
                name,
                request["model"],
                request["weight"],
                request["algorithm"],
                request["sticky_header"],
                request["replicas"],
            )
        )

    def promote(self, name: str, timeout: float) -> dict:
        """Make the canary production once its replicas are ready."""
        return self._deployment(self.platform.deployments.promote(self.project, name, timeout))

    def wait_deployment(self, name: str, timeout: float) -> dict:
        """Wait until every replica is ready; raise when one failed or time ran out."""
        return self._deployment(self.platform.deployments.wait(self.project, name, timeout))

    def deployment_logs(self, name: str, lines: int) -> list[dict]:
        """Return the last lines of each replica's output."""
        return self.platform.deployments.logs(self.project, name, lines)

    def delete_deployment(self, name: str) -> None:
        """Stop a deployment and free its resources."""
        self.platform.deployments.delete(self.project, name)

    def deployment_keys(self, name: str) -> list[dict]:
        """Return a deployment's API keys (ids and first characters, never the keys)."""
        return [_key(row) for row in self.platform.deployments.keys.list(self.project, name)]

    def create_deployment_key(self, name: str) -> dict:
        """Make an API key for a deployment's predict; `key` is shown this once."""
        import getpass

        row, key = self.platform.deployments.keys.create(self.project, name, getpass.getuser())
        return {**_key(row), "key": key}

    def revoke_deployment_key(self, name: str, key_id: str) -> None:
        """Revoke an API key of a deployment."""
        self.platform.deployments.keys.revoke(self.project, name, key_id)

    def predict(self, name: str, data: bytes, content_type: str) -> dict:
        """Send bytes to a deployment; return its JSON answer with `model_version` added."""
        import asyncio

        from ..serving.gateway import Gateway

        gateway = Gateway(self.platform.deployments)

        async def predict():
            try:
                return await gateway.predict(self.project, name, data, content_type)
            finally:
                gateway.close()

        prediction = asyncio.run(predict())
        if prediction.status >= 400:
            message = prediction.json().get("error") or f"the model answered {prediction.status}"
            raise (ModelFailed if prediction.status >= 500 else BadRequest)(
                f"{prediction.model_version}: {message}"
            )
        return prediction.json()

    # experiments

    def _experiment(self, row) -> dict:
        return self.platform.experiments.model(row).model_dump(mode="json")

    def experiments(self) -> list[dict]:
        """Return the project's experiments, newest first."""
        return [self._experiment(row) for row in self.platform.experiments.list(self.project)]

    def experiment(self, name: str) -> dict:
        """Return one experiment with its trials and best trial."""
        return self._experiment(self.platform.experiments.get(self.project, name))

    def create_experiment(self, request) -> dict:
        """Check and create an experiment (an ExperimentRequest); its first trials start."""
        return self._experiment(self.platform.experiments.create(self.project, request))

    def stop_experiment(self, name: str) -> dict:
        """Stop an experiment and its running trials."""
        return self._experiment(self.platform.experiments.stop(self.project, name))

    def resume_experiment(self, name: str, trials: int | None, seconds: float | None) -> dict:
        """Resume a stopped experiment, or a finished one with a larger budget."""
        return self._experiment(
            self.platform.experiments.resume(self.project, name, trials=trials, seconds=seconds)
        )

    def tick(self) -> None:
        """Let jobs and experiments advance (the host's round, or one here when none runs), then wait a moment."""
        self.reconcile()
        time.sleep(FOLLOW_INTERVAL)


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

    def submit(self, request: dict) -> dict:
        """Submit a job (a JobRequest's fields); return it."""
        return self.client.submit(**request)

    def rerun(self, job_id: str) -> dict:
        """Run a job again exactly; return the new job."""
        return self.client.rerun(job_id)

    def copy(self, job_id: str, parameters: dict | None, resources: dict | None) -> dict:
        """Run a job again with other parameters or resources; return the new job."""
        return self.client.copy(job_id, parameters=parameters, resources=resources)

    def resume(self, job_id: str, parameters: dict | None) -> dict:
        """Continue a job from the model it produced; return the new job."""
        return self.client.resume(job_id, parameters=parameters)

    def job(self, job_id: str) -> dict:
        """Return one job with its progress and time left."""
        return self.client.job(job_id)

    def jobs(self, state: str | None) -> list[dict]:
        """Return the project's jobs, newest first."""
        return self.client.jobs(state)

    def stop(self, job_id: str) -> dict:
        """Ask a job to stop; return it."""
        return self.client.stop(job_id)

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

    def usage(self, job_id: str) -> dict:
        """Return a job's resource use: latest, peak_memory_mb, history."""
        return self.client.usage(job_id)

    def quota(self) -> dict:
        """Return the project's quota."""
        return self.client.quota()

    def set_quota(self, quota: dict) -> dict:
        """Replace the project's quota (administrators)."""
        return self.client.set_quota(quota)

    def metrics(self, job_id: str, max_points: int) -> dict:
        """Return a job's metrics as the REST API answers them."""
        return self.client.metrics(job_id, max_points=max_points)

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

    def compare(self, job_ids: list[str]) -> dict:
        """Return jobs side by side as the REST API answers them."""
        return self.client.compare(job_ids)

    # pipelines

    def validate_pipeline(self, text: str) -> dict:
        """Return each node's schemas and every problem of a pipeline file's text."""
        return self.client.validate_pipeline(text)

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

    def pipeline_runs(self, limit: int) -> list[dict]:
        """Return the project's pipeline runs, newest first."""
        return self.client.pipeline_runs(limit)

    def pipeline_run(self, run_id: str) -> dict:
        """Return one pipeline run with its nodes."""
        return self.client.pipeline_run(run_id)

    def stop_pipeline(self, run_id: str) -> dict:
        """Stop a pipeline run; return it."""
        return self.client.stop_pipeline_run(run_id)

    # deployments

    def reconcile_deployments(self) -> list[str]:
        """The service restarts its own replicas."""
        return []

    def deployments(self) -> list[dict]:
        """Return the project's deployments with their state and replicas."""
        return self.client.deployments()

    def deployment(self, name: str) -> dict:
        """Return one deployment with its replicas and request metrics per model version."""
        return self.client.deployment(name)

    def deploy(self, name: str, model: str, replicas: int, algorithm: str | None) -> dict:
        """Deploy a model version; its replicas start at once."""
        return self.client.deploy(name, model, replicas, algorithm)

    def canary(self, name: str, request: dict) -> dict:
        """Serve a canary version (a CanaryRequest's fields) to a percent of the requests."""
        return self.client.canary(name, **request)

    def promote(self, name: str, timeout: float) -> dict:
        """Make the canary production once its replicas are ready (the service waits for them)."""
        return self.client.promote(name, timeout)

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

    def deployment_logs(self, name: str, lines: int) -> list[dict]:
        """Return the last lines of each replica's output."""
        return self.client.deployment_logs(name, lines)

    def delete_deployment(self, name: str) -> None:
        """Stop a deployment and free its resources."""
        self.client.delete_deployment(name)

    def deployment_keys(self, name: str) -> list[dict]:
        """Return a deployment's API keys (ids and first characters, never the keys)."""
        return self.client.deployment_keys(name)

    def create_deployment_key(self, name: str) -> dict:
        """Make an API key for a deployment's predict; `key` is shown this once."""
        return self.client.create_deployment_key(name)

    def revoke_deployment_key(self, name: str, key_id: str) -> None:
        """Revoke an API key of a deployment."""
        self.client.revoke_deployment_key(name, key_id)

    def predict(self, name: str, data: bytes, content_type: str) -> dict:
        """Send bytes to a deployment; return its JSON answer with `model_version` added."""
        return self.client.predict(name, data, content_type)

    # experiments

    def experiments(self) -> list[dict]:
        """Return the project's experiments, newest first."""
        return self.client.experiments()

    def experiment(self, name: str) -> dict:
        """Return one experiment with its trials and best trial."""
        return self.client.experiment(name)

    def create_experiment(self, request) -> dict:
        """Check and create an experiment (an ExperimentRequest); its first trials start."""
        return self.client.create_experiment(request.model_dump(mode="json", exclude_unset=True))

    def stop_experiment(self, name: str) -> dict:
        """Stop an experiment and its running trials."""
        return self.client.stop_experiment(name)

    def resume_experiment(self, name: str, trials: int | None, seconds: float | None) -> dict:
        """Resume a stopped experiment, or a finished one with a larger budget."""
        return self.client.resume_experiment(name, trials=trials, seconds=seconds)

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
