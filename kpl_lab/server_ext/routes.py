"""Every route of the REST API, in the order tornado matches them, with what each takes and answers.

This table is the one source of docs/openapi.yaml (`python -m kpl_lab.server_ext.openapi`).
"""

from __future__ import annotations

import functools
import re

from ..annotation.labels import QUEUE_MAX
from ..api.algorithms import Algorithm, AlgorithmList, AlgorithmVersion, AlgorithmVersionDetail
from ..api.annotation import (
    AnnotationRecord,
    AnnotationTask,
    AnnotationTaskList,
    ExportFormat,
    Label,
    LabelHistory,
    LabelImport,
    LabelRequest,
    PublishRequest,
    QueueOrder,
    RecordQueue,
    RecordState,
    ReviewRequest,
    TaskRequest,
    TaskUpdateRequest,
)
from ..api.catalog import NAME_SCHEMA, Deleted
from ..api.datasets import (
    Dataset,
    DatasetList,
    DatasetVersion,
    DatasetVersionDetail,
    ImportList,
    RecordsPage,
    Stats,
)
from ..api.deployments import (
    CanaryRequest,
    Deployment,
    DeploymentKeyCreated,
    DeploymentKeyList,
    DeploymentList,
    DeploymentLogs,
    DeploymentMetricsHistory,
    DeploymentRequest,
)
from ..api.devices import Devices
from ..api.experiments import (
    Comparison,
    Experiment,
    ExperimentList,
    ExperimentRequest,
    Plot,
    PlotKind,
    ResumeExperimentRequest,
)
from ..api.jobs import (
    MAX_WORKER,
    CopyRequest,
    EventsAccepted,
    Job,
    JobList,
    JobRequest,
    JobState,
    LogChunk,
    Metrics,
    Progress,
    ResumeRequest,
)
from ..api.models import AliasRequest, Model, ModelList, ModelStructure, ModelVersion
from ..api.pipelines import (
    PipelineNodeTypeList,
    PipelineRecords,
    PipelineRun,
    PipelineRunList,
    PipelineTemplateList,
    PipelineText,
    PipelineValidation,
    RerunRequest,
    RunRequest,
)
from ..api.profiles import Profiles, ProfilesRequest
from ..api.quotas import Quota, QuotaRequest
from ..api.server import ServerVersion
from ..api.usage import JobUsage
from ..catalog.datasets import FORMATS
from ..catalog.datasets_view import THUMBNAIL_MAX, THUMBNAIL_MIN
from ..experiments.compare import IDS_PATTERN
from .base import OFFSET_MAX, NotFoundHandler
from .handlers import (
    algorithms,
    annotation,
    datasets,
    deployments,
    devices,
    experiments,
    jobs,
    models,
    pipelines,
    profiles,
    quotas,
)
from .spec import Operation, Query, Route
from .version import VersionHandler

API_PREFIX = "/kpl/api"
_SEGMENT = "[^/]+"
NUMBERS = ("index", "record")  # path parameters that are whole numbers

SEARCH = Query("q", description="case-insensitive search in names and descriptions")
PART = Query(
    "part",
    description="dataset part (default: the first in reading order, `root`, `train`, validation, `test`, then by name)",
)


def _delete(what: str, audit: str) -> Operation:
    return Operation(f"Delete {what} (409 while a job uses it)", Deleted, audit=audit)


ROUTES: list[Route] = [
    Route(
        "/version",
        VersionHandler,
        {"get": Operation("Name and version of the server", ServerVersion, project=False)},
    ),
    Route(
        "/datasets",
        datasets.DatasetsHandler,
        {
            "get": Operation("List datasets", DatasetList, query=(SEARCH,)),
            "post": Operation(
                "Upload a zip or tar and import it as a new dataset version",
                DatasetVersion,
                status=201,
                audit="dataset.upload",
                description="The body is the archive itself, streamed (no multipart). It is written to a "
                "temporary file (refused past the configured size limit), then imported with the "
                "hostile-safe importers: path traversal, links and zip bombs are refused with 400 naming "
                "the entry. A failed import leaves no dataset. Same content again answers the same version.",
                upload=True,
                errors=("503",),
                query=(
                    Query("name", NAME_SCHEMA, required=True),
                    Query("description"),
                    Query(
                        "format",
                        {"type": "string", "enum": list(FORMATS), "default": "import"},
                        "import: every file becomes a path/contentType/content record",
                    ),
                    Query("part", NAME_SCHEMA, "the part the records go to (default `root`)"),
                    Query("filename", description="the uploaded file's name, used in error messages"),
                    Query(
                        "split",
                        description="with `format=imagefolder` only, and without `part` (else 400 naming "
                        "`split`): NAME=FRACTION[,NAME=FRACTION...], each 0 < FRACTION < 1, e.g. `test=0.2`; "
                        "each class is cut alike and `train` takes the rest",
                    ),
                ),
            ),
        },
    ),
    Route(
        "/datasets/{name}",
        datasets.DatasetHandler,
        {
            "get": Operation("A dataset and its versions", Dataset),
            "delete": _delete("every version of a dataset", "dataset.delete"),
        },
    ),
    Route(
        "/datasets/{name}/versions/{version}",
        datasets.DatasetVersionHandler,
        {
            "get": Operation(
                "One dataset version with its parts, schemas, record count and size", DatasetVersionDetail
            ),
            "delete": _delete("one dataset version", "dataset.delete"),
        },
    ),
    Route(
        "/datasets/{name}/versions/{version}/records",
        datasets.RecordsHandler,
        {
            "get": Operation(
                "A page of records, with only the fields asked for",
                RecordsPage,
                description="Only the columns named are read from disk; bytes values become BytesRef objects.",
                query=(
                    PART,
                    Query("offset", {"type": "integer", "minimum": 0, "maximum": OFFSET_MAX, "default": 0}),
                    Query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": datasets.PAGE_MAX, "default": 50},
                    ),
                    Query("columns", description="comma-separated top-level fields (default: all)"),
                ),
            )
        },
    ),
    Route(
        "/datasets/{name}/versions/{version}/records/{index}/fields/{field}",
        datasets.FieldHandler,
        {
            "get": Operation(
                "One field of one record, raw, with its content type",
                None,
                description="Bytes and File values are answered as they are stored with their content "
                "type; other values as JSON. `thumbnail=N` answers an image as a PNG at most N pixels on "
                "its longer side (cached under the storage root per dataset version and record).",
                query=(
                    PART,
                    Query(
                        "thumbnail", {"type": "integer", "minimum": THUMBNAIL_MIN, "maximum": THUMBNAIL_MAX}
                    ),
                ),
                content={
                    "application/json": {"schema": {}},
                    "image/png": {"schema": {"type": "string", "format": "binary"}},
                    "*/*": {"schema": {"type": "string", "format": "binary"}},
                },
            )
        },
    ),
    Route(
        "/datasets/{name}/versions/{version}/stats",
        datasets.StatsHandler,
        {
            "get": Operation(
                "Per-field stats and per-class counts (computed once per version, then cached)",
                Stats,
                query=(PART,),
            )
        },
    ),
    Route(
        "/imports",
        datasets.ImportsHandler,
        {
            "get": Operation(
                "The project's dataset imports in flight (queued or importing)",
                ImportList,
                description="Imports run on their own bounded workers; a full queue answers 503 to a new upload.",
            )
        },
    ),
    Route(
        "/algorithms",
        algorithms.AlgorithmsHandler,
        {
            "get": Operation("List algorithms", AlgorithmList, query=(SEARCH,)),
            "post": Operation(
                "Upload an algorithm archive (zip or tar with environment.yml) as a new version",
                AlgorithmVersion,
                status=201,
                audit="algorithm.upload",
                description="Same content again answers the same version.",
                upload=True,
                query=(
                    Query("name", NAME_SCHEMA, "default: the archive's name inside it"),
                    Query("description"),
                ),
            ),
        },
    ),
    Route(
        "/algorithms/{name}",
        algorithms.AlgorithmHandler,
        {
            "get": Operation("An algorithm and its versions", Algorithm),
            "delete": _delete("every version of an algorithm", "algorithm.delete"),
        },
    ),
    Route(
        "/algorithms/{name}/versions/{version}",
        algorithms.AlgorithmVersionHandler,
        {
            "get": Operation(
                "One algorithm version with functions, resources, inputs, outputs and the parameter schema",
                AlgorithmVersionDetail,
            ),
            "delete": _delete("one algorithm version", "algorithm.delete"),
        },
    ),
    Route(
        "/models",
        models.ModelsHandler,
        {
            "get": Operation("List models", ModelList, query=(SEARCH,)),
            "post": Operation(
                "Upload a model file, or a zip or tar of its folder, as a new model version",
                ModelVersion,
                status=201,
                audit="model.upload",
                description="The body is the file itself, streamed (no multipart). An archive is unpacked "
                "with the algorithm upload's checks: path traversal, links and zip bombs are refused with "
                "400 naming the entry. Same content again answers the same version.",
                upload=True,
                query=(
                    Query("name", NAME_SCHEMA, required=True),
                    Query("description"),
                    Query("filename", NAME_SCHEMA, "the name a single model file is stored under"),
                ),
            ),
        },
    ),
    Route(
        "/models/{name}",
        models.ModelHandler,
        {
            "get": Operation("A model and its versions", Model),
            "delete": _delete("every version of a model", "model.delete"),
        },
    ),
    Route(
        "/models/{name}/versions/{version}",
        models.ModelVersionHandler,
        {
            "get": Operation("One model version with its files and lineage", ModelVersion),
            "delete": _delete("one model version", "model.delete"),
        },
    ),
    Route(
        "/models/{name}/versions/{version}/structure",
        models.ModelStructureHandler,
        {
            "get": Operation(
                "Layers or ops, parameter counts and input/output shapes of a model version's files",
                ModelStructure,
                description="ONNX graphs are read with the onnx package; PyTorch files as TorchScript or as "
                "state dicts with weights_only=True (a full pickle is never unpickled: its entry has an "
                "`error`); other files are listed with their sizes.",
            )
        },
    ),
    Route(
        "/models/{name}/versions/{version}/download",
        models.ModelDownloadHandler,
        {
            "get": Operation(
                "A model version's files as one zip archive",
                None,
                content={"application/zip": {"schema": {"type": "string", "format": "binary"}}},
            )
        },
    ),
    Route(
        "/models/{name}/aliases/{alias}",
        models.ModelAliasHandler,
        {
            "get": Operation("The model version an alias points at (NAME@ALIAS)", ModelVersion),
            "put": Operation(
                "Point an alias (production, canary, any name) at a version",
                Model,
                audit="model.alias.set",
                body=AliasRequest,
                description="Moves the alias when it pointed elsewhere. `NAME@ALIAS` then resolves wherever "
                "a model reference is accepted (deployments, job inputs, the CLI).",
            ),
            "delete": Operation("Remove an alias", Model, audit="model.alias.remove"),
        },
    ),
    Route(
        "/jobs",
        jobs.JobsHandler,
        {
            "get": Operation(
                "List jobs, newest first",
                JobList,
                query=(Query("state", JobState),),
            ),
            "post": Operation(
                "Submit a job (queued, started at once when it fits)",
                Job,
                status=201,
                description="A request that can never fit (more than the machine or the project quota) "
                "answers 400 naming the resource; invalid parameters answer 400 listing each one.",
                body=JobRequest,
                body_required=True,
            ),
        },
    ),
    Route("/jobs/{job_id}", jobs.JobHandler, {"get": Operation("One job", Job)}),
    Route(
        "/jobs/{job_id}/stop",
        jobs.JobStopHandler,
        {"post": Operation("Stop a job (409 when it has already ended)", Job)},
    ),
    Route(
        "/jobs/{job_id}/rerun",
        jobs.JobRerunHandler,
        {
            "post": Operation(
                "Run the same algorithm version, inputs, parameters and resources again", Job, status=201
            )
        },
    ),
    Route(
        "/jobs/{job_id}/copy",
        jobs.JobCopyHandler,
        {
            "post": Operation(
                "Run a job again with some parameters or resources changed", Job, status=201, body=CopyRequest
            )
        },
    ),
    Route(
        "/jobs/{job_id}/resume",
        jobs.JobResumeHandler,
        {
            "post": Operation(
                "Run a copy that starts from the model this job registered",
                Job,
                status=201,
                body=ResumeRequest,
            )
        },
    ),
    Route(
        "/jobs/{job_id}/logs",
        jobs.JobLogsHandler,
        {
            "get": Operation(
                "The job's output, a chunk at a time, or followed live",
                LogChunk,
                description="Without `follow`: a JSON LogChunk of at most `limit` bytes from `offset`. With "
                "`wait=S`, a request with nothing new waits up to S seconds for output or the job's end "
                "(long poll). With `follow=1`: a `text/plain` chunked stream from `offset` that sends new "
                "output as it is written and ends when the job ends (bounded memory).",
                query=(
                    Query("offset", {"type": "integer", "minimum": 0, "maximum": OFFSET_MAX, "default": 0}),
                    Query(
                        "limit",
                        {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": jobs.LOG_CHUNK_MAX,
                            "default": jobs.LOG_CHUNK,
                        },
                    ),
                    Query(
                        "wait",
                        {"type": "integer", "minimum": 0, "maximum": jobs.WAIT_MAX_SECONDS, "default": 0},
                        "seconds",
                    ),
                    Query("follow", {"type": "integer", "enum": [0, 1], "default": 0}),
                    Query(
                        "worker",
                        {"type": "integer", "minimum": 0, "maximum": MAX_WORKER, "default": 0},
                        "worker (rank) of the job",
                    ),
                ),
                content={"text/plain": {"schema": {"type": "string"}}},
            )
        },
    ),
    Route(
        "/jobs/{job_id}/metrics",
        jobs.JobMetricsHandler,
        {
            "get": Operation(
                "Metric points grouped by figure, then series, at most max_points per series",
                Metrics,
                query=(
                    Query(
                        "max_points", {"type": "integer", "minimum": 2, "maximum": 100_000, "default": 1000}
                    ),
                ),
            )
        },
    ),
    Route(
        "/jobs/{job_id}/progress",
        jobs.JobProgressHandler,
        {"get": Operation("Fraction done and seconds left", Progress)},
    ),
    Route(
        "/jobs/{job_id}/usage",
        jobs.JobUsageHandler,
        {"get": Operation("Live resource use of the job", JobUsage)},
    ),
    Route(
        "/jobs/{job_id}/events",
        jobs.JobEventsHandler,
        {
            "post": Operation(
                "Events pushed by a job that shares no folder with the platform (Kubernetes)",
                EventsAccepted,
                description="The body is a JSON array of kpl-helper events; the job's own token "
                "authenticates it, not the server token.",
                body={"type": "array", "items": {"type": "object"}},
                body_required=True,
                project=False,
                job_token=True,
            )
        },
    ),
    Route(
        "/deployments",
        deployments.DeploymentsHandler,
        {
            "get": Operation("List deployments with their state and replicas", DeploymentList),
            "post": Operation(
                "Deploy a model version as an HTTP API (its replicas start at once)",
                Deployment,
                status=201,
                audit="deployment.create",
                description="Each replica runs the algorithm's `deploy` function (docs/serving.md) and holds "
                "its resources in the ledger; poll the deployment until `state` is `ready`. The algorithm "
                "defaults to the one whose job made the model; one that cannot serve it (no `deploy` "
                "function, or no job made the model and none is named) answers 400 naming `algorithm`. "
                "503 when the replicas do not fit now.",
                body=DeploymentRequest,
                body_required=True,
                errors=("503",),
            ),
        },
    ),
    Route(
        "/deployments/{name}",
        deployments.DeploymentHandler,
        {
            "get": Operation("One deployment with its replicas and request metrics per version", Deployment),
            "delete": Operation(
                "Stop a deployment's replicas, free their resources and forget it",
                Deleted,
                audit="deployment.delete",
            ),
        },
    ),
    Route(
        "/deployments/{name}/canary",
        deployments.DeploymentCanaryHandler,
        {
            "post": Operation(
                "Serve a canary version to `weight` percent of the requests",
                Deployment,
                audit="deployment.canary",
                description="A new canary version replaces the old canary's replicas; the same version only "
                "changes the weight. With `sticky_header`, a caller's header value keeps it on one version.",
                body=CanaryRequest,
                body_required=True,
                errors=("503",),
            )
        },
    ),
    Route(
        "/deployments/{name}/promote",
        deployments.DeploymentPromoteHandler,
        {
            "post": Operation(
                "Make the canary production: its replicas are ready before the old ones stop",
                Deployment,
                audit="deployment.promote",
                description="Answers once the switch is done; no request fails during it. 409 without a "
                "canary, 503 when the canary's replicas do not become ready.",
                errors=("503",),
            )
        },
    ),
    Route(
        "/deployments/{name}/logs",
        deployments.DeploymentLogsHandler,
        {
            "get": Operation(
                "The last lines of each replica's output",
                DeploymentLogs,
                query=(Query("lines", {"type": "integer", "minimum": 1, "maximum": 10_000, "default": 100}),),
            )
        },
    ),
    Route(
        "/deployments/{name}/metrics",
        deployments.DeploymentMetricsHandler,
        {
            "get": Operation(
                "Request metrics per model version over time, in 10 s intervals",
                DeploymentMetricsHistory,
                description="What the gateway counted: requests, errors and latency p50/p99 of each "
                "interval with requests, and totals. Written every few seconds (the platform's "
                "background round) and kept 7 days.",
                query=(
                    Query(
                        "since",
                        {"type": "string", "format": "date-time"},
                        "ISO 8601 time of the first interval (default: an hour ago)",
                    ),
                ),
            )
        },
    ),
    Route(
        "/deployments/{name}/keys",
        deployments.DeploymentKeysHandler,
        {
            "get": Operation("The deployment's API keys (never the keys themselves)", DeploymentKeyList),
            "post": Operation(
                "Make an API key for callers outside JupyterLab: it opens this deployment's predict only",
                DeploymentKeyCreated,
                status=201,
                audit="deployment.key.create",
                description="The answer holds the key this once; the platform keeps only its SHA-256 "
                "digest. Callers send it as `Authorization: Bearer <key>` or `X-KPL-API-Key: <key>`.",
            ),
        },
    ),
    Route(
        "/deployments/{name}/keys/{key_id}",
        deployments.DeploymentKeyHandler,
        {
            "delete": Operation(
                "Revoke an API key of the deployment",
                Deleted,
                audit="deployment.key.revoke",
                description="Callers using it get 403 from now on (within 2 s on other servers of "
                "the same platform, which remember keys that long).",
            )
        },
    ),
    Route(
        "/deployments/{name}/predict",
        deployments.DeploymentPredictHandler,
        {
            "post": Operation(
                "One prediction: the body (or a multipart file) goes to a ready replica",
                None,
                description="The answer is the model's JSON response (classification, rectangle boxes or "
                "segmentation mask, docs/serving.md) with the header `X-KPL-Model-Version: NAME:VERSION` "
                "naming the version that served it. Bad input answers the model's 4xx (its error in `message`); a model that fails "
                "answers 502; while no replica is ready, 503 at once with the state and reason.",
                upload=True,
                content={"application/json": {"schema": {"type": "object"}}},
                errors=("503",),
                deployment_key=True,
            )
        },
    ),
    Route(
        "/devices",
        devices.DevicesHandler,
        {"get": Operation("The machine's capacity, its accelerators and what is in use", Devices)},
    ),
    Route(
        "/quota",
        quotas.QuotaHandler,
        {
            "get": Operation("The project's quota (what it may hold at once)", Quota),
            "put": Operation(
                "Replace the project's quota (administrators); every next reservation decides with it",
                Quota,
                audit="quota.set",
                body=QuotaRequest,
                body_required=True,
            ),
        },
    ),
    Route(
        "/profiles",
        profiles.ProfilesHandler,
        {
            "get": Operation("The notebook profiles (what a spawn form offers)", Profiles, project=False),
            "put": Operation(
                "Replace the notebook profiles (administrators); every next spawn form and spawn decides with them",
                Profiles,
                audit="profiles.set",
                description="Each entry has the fields of `c.KPLSpawner.profiles` (docs/multi-user.md); a "
                "mistake answers 400 naming the entry and field. The edit stands until the hub's configured "
                "profiles themselves change.",
                body=ProfilesRequest,
                body_required=True,
                project=False,
            ),
        },
    ),
    Route(
        "/pipelines/validate",
        pipelines.PipelineValidateHandler,
        {
            "post": Operation(
                "Validate a pipeline file: each node's input and output schemas, every problem",
                PipelineValidation,
                description="A file with problems still answers 200, with ok false and the problems.",
                body=PipelineText,
                body_required=True,
            )
        },
    ),
    Route(
        "/pipelines/templates",
        pipelines.PipelineTemplatesHandler,
        {"get": Operation("The pipeline templates shipped with KPL Lab", PipelineTemplateList)},
    ),
    Route(
        "/pipelines/node-types",
        pipelines.PipelineNodeTypesHandler,
        {"get": Operation("The node types with their parameters' JSON schemas", PipelineNodeTypeList)},
    ),
    Route(
        "/pipelines/runs",
        pipelines.PipelineRunsHandler,
        {
            "get": Operation(
                "List pipeline runs, newest first",
                PipelineRunList,
                query=(Query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50}),),
            ),
            "post": Operation(
                "Start a run of a pipeline file (a file with problems answers 400 listing each one)",
                PipelineRun,
                status=201,
                body=RunRequest,
                body_required=True,
            ),
        },
    ),
    Route(
        "/pipelines/runs/{run_id}",
        pipelines.PipelineRunHandler,
        {"get": Operation("One pipeline run", PipelineRun)},
    ),
    Route(
        "/pipelines/runs/{run_id}/stop",
        pipelines.PipelineRunStopHandler,
        {"post": Operation("Stop a pipeline run (409 when it has already ended)", PipelineRun)},
    ),
    Route(
        "/pipelines/runs/{run_id}/nodes/{node}/records",
        pipelines.PipelineNodeRecordsHandler,
        {
            "get": Operation(
                "The first records and fields of a node's output in a run",
                PipelineRecords,
                description="A node fused into another's query has no output of its own: this request "
                "writes it (its own query over the run's written inputs, into the cache, as `keep: true` "
                "would), once.",
                query=(
                    Query("port", description="output port (needed when the node has several)"),
                    Query("limit", {"type": "integer", "minimum": 0, "maximum": 100, "default": 10}),
                ),
            )
        },
    ),
    Route(
        "/pipelines/runs/{run_id}/rerun",
        pipelines.PipelineRunRerunHandler,
        {
            "post": Operation(
                "Run an earlier run's file again: every node (fresh), or from one node, reusing the rest",
                PipelineRun,
                status=201,
                body=RerunRequest,
            )
        },
    ),
    Route(
        "/comparisons",
        experiments.ComparisonHandler,
        {
            "get": Operation(
                "Two or more jobs side by side: parameters (which differ), final and best metrics, "
                "inputs, algorithm versions, durations and memory",
                Comparison,
                query=(
                    Query(
                        "ids",
                        {"type": "string", "pattern": IDS_PATTERN},
                        "comma-separated job ids (2 to 20)",
                        required=True,
                    ),
                ),
            )
        },
    ),
    Route(
        "/experiments",
        experiments.ExperimentsHandler,
        {
            "get": Operation("List experiments (hyperparameter searches), newest first", ExperimentList),
            "post": Operation(
                "Check and create an experiment; its first trials start at once",
                Experiment,
                status=201,
                description="The space and objective are checked before any trial: unknown parameters, "
                "values parameter.yml refuses and unknown inputs answer 400 naming each field (e.g. "
                "`space.lr`); an objective metric no earlier run of the function pushed is a warning in "
                "the answer. Trials are ordinary jobs of the project, under its quota and queue.",
                body=ExperimentRequest,
                body_required=True,
            ),
        },
    ),
    Route(
        "/experiments/{name}", experiments.ExperimentHandler, {"get": Operation("One experiment", Experiment)}
    ),
    Route(
        "/experiments/{name}/stop",
        experiments.ExperimentStopHandler,
        {"post": Operation("Stop an experiment and its running trials (409 when not running)", Experiment)},
    ),
    Route(
        "/experiments/{name}/resume",
        experiments.ExperimentResumeHandler,
        {
            "post": Operation(
                "Resume a stopped experiment, or a finished one with a larger budget",
                Experiment,
                description="The trials a stop interrupted are tried again first.",
                body=ResumeExperimentRequest,
            )
        },
    ),
    Route(
        "/experiments/{name}/plots/{kind}",
        experiments.ExperimentPlotHandler,
        {
            "get": Operation(
                f"Optuna's {', '.join(k.value for k in PlotKind)} plot of the study as a Plotly figure",
                Plot,
                description="409 until enough trials have completed (1 for history, 2 for the others).",
            )
        },
    ),
]


EXPORT_FORMAT = Query("format", {"type": "string", "enum": [f.value for f in ExportFormat]}, required=True)
ANNOTATION_ROUTES: list[Route] = [
    Route(
        "/annotation/tasks",
        annotation.AnnotationTasksHandler,
        {
            "get": Operation(
                "List annotation tasks, newest first, with their progress and the project's members",
                AnnotationTaskList,
            ),
            "post": Operation(
                "Create an annotation task on a dataset version",
                AnnotationTask,
                status=201,
                audit="annotation.task.create",
                description="The label schema is checked against the kind (keypoints need keypoint names), "
                "the parts and the content field against the dataset version, assignees and reviewers "
                "against the project's members (where the server knows them). Records are dealt to the "
                "assignees in turn: record r to assignees[r mod n].",
                body=TaskRequest,
                body_required=True,
            ),
        },
    ),
    Route(
        "/annotation/tasks/{name}",
        annotation.AnnotationTaskHandler,
        {
            "get": Operation(
                "One annotation task with its progress per state and per person", AnnotationTask
            ),
            "patch": Operation(
                "Change a task's description, annotators, reviewers or label schema (its maker or an administrator)",
                AnnotationTask,
                audit="annotation.task.change",
                description="A new label schema keeps every class, second-level class and keypoint of the old one.",
                body=TaskUpdateRequest,
                body_required=True,
            ),
            "delete": Operation(
                "Delete a task with its labels, history and suggestions (409 while a pre-labelling run goes on)",
                Deleted,
                audit="annotation.task.delete",
            ),
        },
    ),
    Route(
        "/annotation/tasks/{name}/queue",
        annotation.AnnotationQueueHandler,
        {
            "get": Operation(
                "A page of the task's records of one state, in record or uncertainty order",
                RecordQueue,
                description="`order=uncertainty` lists the unlabelled records with a pre-labelling suggestion "
                "first, the least certain first, then the others in record order. `mine=1`: unlabelled "
                "records dealt to the caller, labels the caller saved last (a rejected label goes back to "
                "its annotator this way).",
                query=(
                    Query(
                        "state",
                        {
                            "type": "string",
                            "enum": [*(s.value for s in RecordState), "all"],
                            "default": "unlabelled",
                        },
                    ),
                    Query(
                        "order",
                        {"type": "string", "enum": [o.value for o in QueueOrder], "default": "record"},
                    ),
                    Query("mine", {"type": "integer", "enum": [0, 1], "default": 0}),
                    Query("after", description="the `next` of the previous page"),
                    Query("limit", {"type": "integer", "minimum": 1, "maximum": QUEUE_MAX, "default": 50}),
                ),
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/publish",
        annotation.AnnotationPublishHandler,
        {
            "post": Operation(
                "Publish the task's accepted labels as a new dataset version with train and test parts",
                DatasetVersion,
                status=201,
                audit="annotation.publish",
                description="Accepted records not marked dropped are written with every field of their source "
                "record and the label fields of the record format (`class_name`, `subclass` for class kinds; "
                "`width`, `height`, `object` for object kinds; `label`, the value as JSON), split per class "
                "with a seeded shuffle, and registered with lineage to the task. The task's maker or an "
                "administrator publishes; 409 when no label is accepted.",
                body=PublishRequest,
                body_required=True,
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/export",
        annotation.AnnotationExportHandler,
        {
            "get": Operation(
                "The task's labels as a zip of COCO, Pascal VOC, YOLO or Labelme files",
                None,
                content={"application/zip": {"schema": {"type": "string", "format": "binary"}}},
                description="Files are named after the record's `path` field (PART/INDEX without one), so an "
                "export imports back. COCO holds boxes, polygons, masks and keypoints; VOC boxes; YOLO boxes "
                "and polygons; Labelme boxes and polygons; OCR text rides along. A format that cannot hold "
                "the task's kind answers 400 naming `format` (class tasks are published instead).",
                query=(
                    EXPORT_FORMAT,
                    Query(
                        "all",
                        {"type": "integer", "enum": [0, 1], "default": 0},
                        "1: every saved label, not only the accepted ones (dropped records never)",
                    ),
                ),
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/import",
        annotation.AnnotationImportHandler,
        {
            "post": Operation(
                "Label the task's unlabelled records from a zip or tar of COCO, VOC, YOLO or Labelme files",
                LabelImport,
                audit="annotation.import",
                description="The body is the archive itself, streamed, read with the upload's checks. Each "
                "labelled image is matched to the record whose `path` ends with its file name; its objects "
                "are checked against the task's classes (400 naming the file). Records that have a label "
                "keep it; the others get the imported one, as `labelled`, with an `imported` history step. "
                "YOLO class numbers are read from classes.txt, else the task's class order.",
                upload=True,
                query=(EXPORT_FORMAT,),
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/records/{record}",
        annotation.AnnotationRecordHandler,
        {
            "get": Operation(
                "One record of a task: its fields (bytes as URLs), its label and its suggestion",
                AnnotationRecord,
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/records/{record}/label",
        annotation.LabelHandler,
        {
            "put": Operation(
                "Save a record's label over the version the annotator loaded",
                Label,
                description="Durable once answered. A label saved or reviewed since that version answers 409 "
                "naming the record, who saved it and when: nobody overwrites another's label silently. The "
                "value is checked against the task's kind and classes (400 naming the field). A saved label "
                "is `labelled` again, to be reviewed.",
                body=LabelRequest,
                body_required=True,
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/records/{record}/review",
        annotation.LabelReviewHandler,
        {
            "post": Operation(
                "Accept or reject a record's label (a rejection needs a comment and goes back to its annotator)",
                Label,
                body=ReviewRequest,
                body_required=True,
            )
        },
    ),
    Route(
        "/annotation/tasks/{name}/records/{record}/history",
        annotation.LabelHistoryHandler,
        {
            "get": Operation(
                "Every save, import and review of a record's label: who, when, the value, the suggestion it took",
                LabelHistory,
            )
        },
    ),
]
ROUTES += ANNOTATION_ROUTES


def tornado_pattern(path: str) -> str:
    """Turn `/datasets/{name}` into the tornado pattern `/kpl/api/datasets/([^/]+)`."""
    number = "[0-9]+"
    pattern = re.sub(r"\{(\w+)\}", lambda m: f"({number if m.group(1) in NUMBERS else _SEGMENT})", path)
    return f"{API_PREFIX}{pattern}/?"


@functools.cache
def _operations() -> dict[type, dict[str, Operation]]:
    return {route.handler: route.operations for route in ROUTES}


def operation_of(handler: type, method: str) -> Operation | None:
    """Return what the routes table declares for a handler's method (None: no route declares it)."""
    return _operations().get(handler, {}).get(method.lower())


def handlers() -> list[tuple[str, type]]:
    """Return the tornado handler list."""
    routes = [(tornado_pattern(route.path), route.handler) for route in ROUTES]
    return [*routes, (API_PREFIX + "/.*", NotFoundHandler)]
