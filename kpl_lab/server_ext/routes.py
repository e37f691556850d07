"""Every route of the REST API: (OpenAPI path, handler), in the order tornado matches them."""

from __future__ import annotations

import re

from .handlers import algorithms, datasets, devices, jobs, models
from .version import VersionHandler

API_PREFIX = "/kpl/api"
_SEGMENT = "[^/]+"

ROUTES: list[tuple[str, type]] = [
    ("/version", VersionHandler),
    ("/datasets", datasets.DatasetsHandler),
    ("/datasets/{name}", datasets.DatasetHandler),
    ("/datasets/{name}/versions/{version}", datasets.DatasetVersionHandler),
    ("/datasets/{name}/versions/{version}/records", datasets.RecordsHandler),
    ("/datasets/{name}/versions/{version}/records/{index}/fields/{field}", datasets.FieldHandler),
    ("/datasets/{name}/versions/{version}/stats", datasets.StatsHandler),
    ("/imports", datasets.ImportsHandler),
    ("/algorithms", algorithms.AlgorithmsHandler),
    ("/algorithms/{name}", algorithms.AlgorithmHandler),
    ("/algorithms/{name}/versions/{version}", algorithms.AlgorithmVersionHandler),
    ("/models", models.ModelsHandler),
    ("/models/{name}", models.ModelHandler),
    ("/models/{name}/versions/{version}", models.ModelVersionHandler),
    ("/jobs", jobs.JobsHandler),
    ("/jobs/{job_id}", jobs.JobHandler),
    ("/jobs/{job_id}/stop", jobs.JobStopHandler),
    ("/jobs/{job_id}/rerun", jobs.JobRerunHandler),
    ("/jobs/{job_id}/copy", jobs.JobCopyHandler),
    ("/jobs/{job_id}/resume", jobs.JobResumeHandler),
    ("/jobs/{job_id}/logs", jobs.JobLogsHandler),
    ("/jobs/{job_id}/metrics", jobs.JobMetricsHandler),
    ("/jobs/{job_id}/progress", jobs.JobProgressHandler),
    ("/jobs/{job_id}/usage", jobs.JobUsageHandler),
    ("/jobs/{job_id}/events", jobs.JobEventsHandler),
    ("/devices", devices.DevicesHandler),
]


def tornado_pattern(path: str) -> str:
    """Turn `/datasets/{name}` into the tornado pattern `/kpl/api/datasets/([^/]+)`."""
    index = "[0-9]+"
    pattern = re.sub(r"\{(\w+)\}", lambda m: f"({index if m.group(1) == 'index' else _SEGMENT})", path)
    return f"{API_PREFIX}{pattern}/?"


def handlers() -> list[tuple[str, type]]:
    """Return the tornado handler list."""
    return [(tornado_pattern(path), handler) for path, handler in ROUTES]
