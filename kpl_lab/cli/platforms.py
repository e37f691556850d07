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
from collections.abc import Iterator
from pathlib import Path

from ..catalog import serialize
from ..errors import BadRequest, NotFound
from ..text import sparkline

SUMMARY_WIDTH = 30
ALL_POINTS = 100_000  # the REST API's most points per series: a summary sees every point below it


def open_platform(args) -> LocalPlatform | ServicePlatform:
    """Return the shared service under the hub (unless --home or --database-url names a platform), else this machine's."""
    from ..client import Client, service_configured

    if service_configured() and not (args.home or args.database_url):
        return ServicePlatform(Client(project=args.project))
    from ..platform import Platform

    settings = {"home": args.home, "database_url": args.database_url}
    return LocalPlatform(Platform(**{name: value for name, value in settings.items() if value}), args.project)


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


class LocalPlatform:
    """The platform whose database and files this process opens itself."""

    def __init__(self, platform, project: str | None) -> None:
        self.platform = platform
        self.project = project or platform.default_project
        self.grace_seconds = platform.jobs.grace_seconds

    def close(self) -> None:
        """Close the database."""
        self.platform.close()

    def reconcile(self) -> None:
        """Finish jobs that ended while nothing watched them and start queued ones."""
        self.platform.jobs.reconcile()

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

    # jobs

    def _job(self, job, queue=None) -> dict:
        fraction, eta = self.platform.jobs.progress(self.project, job.id)
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

    def metrics(self, job_id: str, max_points: int) -> dict:
        """Return a job's metrics as the REST API answers them."""
        job = self.platform.jobs.get(self.project, job_id)
        return serialize.metrics_json(
            job, self.platform.jobs.metrics(self.project, job_id, max_points), max_points
        )

    def logs(self, job_id: str, follow: bool, worker: int) -> Iterator[str]:
        """Yield a worker's output line by line; with `follow`, until the job ends."""
        return self.platform.jobs.follow_logs(self.project, job_id, follow=follow, worker=worker)


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
        """Upload an algorithm folder or archive; datasets and models are added where the service can read them."""
        if kind != "algorithm":
            alternative = {
                "dataset": "upload an archive in the Lab's Datasets panel or with "
                "kpl_lab.client.Client().upload_dataset(archive, name)",
                "model": "models are registered from a job's outputs (kpl-lab job submit ...)",
            }[kind]
            raise BadRequest(
                f"under the hub, `kpl-lab {kind} add` cannot add a folder from this notebook's disk: {alternative}",
                field="path",
            )
        source = Path(path)
        if not source.exists():
            raise BadRequest(f"{path}: no such file or folder", field="path")
        if source.is_file():
            return {"kind": kind, **self.client.upload_algorithm(source, name=name, description=description)}
        with tempfile.TemporaryDirectory() as folder:
            archive = Path(folder) / f"{source.resolve().name}.tar.gz"
            with tarfile.open(archive, "w:gz") as tar:
                tar.add(source, arcname=source.resolve().name)
            return {"kind": kind, **self.client.upload_algorithm(archive, name=name, description=description)}

    def catalog_delete(self, kind: str, ref: str) -> list[str]:
        """Delete one version (NAME:VERSION) or every version (NAME); return the refs deleted."""
        name, version = _split(ref)
        return getattr(self.client, f"delete_{kind}")(name, version)["deleted"]

    def algorithm_parameters(self, ref: str) -> tuple[str, dict]:
        """Return an algorithm version's full ref and its parameter.yml values."""
        version, _ = self.catalog_show("algorithm", ref)
        return version["ref"], version.get("parameters") or {}

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

    def _all_logs(self, job_id: str, worker: int) -> Iterator[str]:
        offset = 0
        while True:
            chunk = self.client.logs(job_id, offset, worker=worker)
            if chunk["text"]:
                yield chunk["text"]
            if chunk["next_offset"] == offset or not chunk["text"]:
                return
            offset = chunk["next_offset"]
