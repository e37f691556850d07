"""Python client of the KPL Lab REST API: what magics, widgets and scripts in a kernel use.

`Client()` finds the API on its own. In a notebook under JupyterHub it talks to the shared
platform service (`KPL_SERVICE_URL`) as the user (`JUPYTERHUB_API_TOKEN`), in the notebook's
project (`KPL_PROJECT`); the spawner and hub set all three. Elsewhere: `KPL_API_URL` and
`KPL_API_TOKEN` (set by the server extension for the kernels it starts), else the Jupyter
server that started this kernel (or one whose root folder holds the working folder).
`Client(hub_url, token)` from outside finds the hub's service and the user's project.
"""

from __future__ import annotations

import json
import mimetypes
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import BadRequest, Conflict, Forbidden, KPLError, ModelFailed, NotFound, Unavailable

API_PATH = "kpl/api/"
ERRORS: dict[int, type[KPLError]] = {
    400: BadRequest,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    502: ModelFailed,
    503: Unavailable,
}
UPLOAD_BLOCK = 1024 * 1024
FOLLOW_WAIT_SECONDS = 10  # long poll: the server answers at once when output comes


def _api_root(url: str) -> str:
    """Return the API root for a server or API URL (ending in `/kpl/api/`)."""
    url = url.rstrip("/") + "/"
    return url if url.endswith("/" + API_PATH) else url + API_PATH


def _running_servers() -> list[dict]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:  # a kernel environment without jupyter-server
        return []
    return [info for info in list_running_servers() if info.get("url") and not info.get("sock")]


def _pick_server(servers: list[dict]) -> dict | None:
    """Prefer the server that started this kernel, then one whose root folder holds the cwd."""
    parent = os.environ.get("JPY_PARENT_PID")
    for info in servers:
        if parent and str(info.get("pid")) == parent:
            return info
    cwd = Path.cwd().resolve()
    holding = [info for info in servers if cwd.is_relative_to(Path(info.get("root_dir") or "/").resolve())]
    holding.sort(key=lambda info: len(str(info.get("root_dir") or "")), reverse=True)
    return holding[0] if holding else None


SERVICE_API = "services/kpl/api/"


def _get_json(url: str, token: str, timeout: float) -> Any:
    """Return the JSON answer of a GET, or None when there is none (not found, not JSON, no answer)."""
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        error.close()
        return None
    except (ValueError, urllib.error.URLError):  # unreachable: the API request itself will say so
        return None


def hub_api(url: str, token: str, timeout: float = 30.0) -> tuple[str, list[str]] | None:
    """Return the platform service's API root and the user's projects when `url` is a JupyterHub, else None."""
    root = url.rstrip("/").removesuffix("/hub") + "/"
    hub = _get_json(root + "hub/api/", token, timeout)
    if not isinstance(hub, dict) or "version" not in hub:
        return None
    user = _get_json(root + "hub/api/user", token, timeout)
    if not isinstance(user, dict):
        raise Forbidden(f"the hub at {root} does not know this token")
    return root + SERVICE_API, sorted(user.get("groups") or [])


def service_configured() -> bool:
    """Say whether this process runs in a notebook under the hub, whose platform is the shared service."""
    return bool(os.environ.get("KPL_SERVICE_URL") and os.environ.get("JUPYTERHUB_API_TOKEN"))


def discover() -> tuple[str, str]:
    """Return the API root URL and token of the KPL Lab server this kernel belongs to."""
    hub_token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if service_configured():  # a notebook under the hub: the shared service
        return urllib.parse.urljoin(os.environ["KPL_SERVICE_URL"].rstrip("/") + "/", "api/"), hub_token
    if os.environ.get("KPL_API_URL"):
        return _api_root(os.environ["KPL_API_URL"]), os.environ.get("KPL_API_TOKEN", "")
    server = _pick_server(_running_servers())
    if server is not None:
        return _api_root(server["url"]), server.get("token") or hub_token
    if os.environ.get("JUPYTERHUB_SERVICE_URL"):
        return _api_root(os.environ["JUPYTERHUB_SERVICE_URL"]), hub_token
    raise KPLError(
        "no KPL Lab server found: run this in JupyterLab with the kpl_lab extension, "
        "or set KPL_API_URL and KPL_API_TOKEN"
    )


class _Progress:
    """A readable body that reports how many bytes were sent."""

    def __init__(self, stream: IO[bytes], total: int, report: Callable[[int, int], None] | None) -> None:
        self.stream, self.total, self.report, self.sent = stream, total, report, 0

    def read(self, size: int = -1) -> bytes:
        block = self.stream.read(UPLOAD_BLOCK if size is None or size < 0 else min(size, UPLOAD_BLOCK))
        self.sent += len(block)
        if self.report is not None:
            self.report(self.sent, self.total)
        return block


def _raise_for(error: urllib.error.HTTPError, method: str, path: str) -> None:
    """Raise the platform error a failed response stands for, with the server's message and field."""
    body = error.read()
    kind = error.headers.get("Content-Type", "")
    error.close()
    message, field, errors = "", None, []
    if kind.startswith("application/json"):
        try:
            data = json.loads(body)
            message, field = data.get("message") or data.get("reason") or "", data.get("field")
            errors = [(e["field"], e["message"]) for e in data.get("errors") or []]
        except (ValueError, AttributeError, KeyError, TypeError):
            pass
    elif kind.startswith("text/plain"):
        message = body.decode("utf-8", "replace").strip()[:500]
    message = message or f"{method} /{API_PATH}{path}: {error.code} {error.reason}"
    failure = ERRORS.get(error.code, KPLError)(message, field=field, errors=errors)
    failure.status = error.code
    raise failure from None


def _quote(part: str | int) -> str:
    return urllib.parse.quote(str(part), safe="")


def _one_project(projects: list[str]) -> str | None:
    """Return the user's only project (None: the platform's default); refuse to guess among several."""
    if len(projects) > 1:
        raise BadRequest(
            f"you are in several projects: {', '.join(projects)}; pass project=", field="project"
        )
    return projects[0] if projects else None


class Client:
    """Talk to the KPL Lab REST API; errors come back as `kpl_lab.errors` exceptions."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        project: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        if url is None:
            url, found_token = discover()
            token = found_token if token is None else token
            if project is None and os.environ.get("KPL_SERVICE_URL"):
                project = os.environ.get("KPL_PROJECT") or None
        elif not url.rstrip("/").endswith("/" + API_PATH.rstrip("/")) and token:
            found = hub_api(url, token, timeout)
            if found is not None:
                url, projects = found
                if project is None:
                    project = _one_project(projects)
        self.url = _api_root(url)
        self.token = token or ""
        self.project = project
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.url!r}, project={self.project!r})"

    # transport

    def _url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = {key: value for key, value in (params or {}).items() if value is not None}
        if self.project is not None:
            query.setdefault("project", self.project)
        url = self.url + path.lstrip("/")
        if query:
            url += "?" + urllib.parse.urlencode(
                {k: ("1" if v is True else "0" if v is False else v) for k, v in query.items()}
            )
        return url

    def _open(
        self,
        method: str,
        path: str,
        params: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ):
        """Send a request and return the open response; raise a platform error for 4xx/5xx."""
        all_headers = {"Accept": "application/json", **(headers or {})}
        if self.token:
            all_headers["Authorization"] = f"token {self.token}"
        data = body
        if body is not None and not hasattr(body, "read") and not isinstance(body, bytes):
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        elif body is None and method in ("POST", "PUT", "PATCH"):
            data = b""
        request = urllib.request.Request(
            self._url(path, params), data=data, method=method, headers=all_headers
        )
        try:
            return urllib.request.urlopen(request, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as error:
            _raise_for(error, method, path)
        except urllib.error.URLError as error:
            raise KPLError(f"cannot reach the KPL Lab API at {self.url}: {error.reason}") from None

    def request(self, method: str, path: str, params: dict[str, Any] | None = None, body: Any = None) -> Any:
        """Send one request to `path` (relative to /kpl/api/) and return its decoded JSON answer."""
        with self._open(method, path, params, body) as response:
            raw = response.read()
        return json.loads(raw) if raw else None

    def raw(self, path: str, params: dict[str, Any] | None = None) -> tuple[bytes, str]:
        """Return the body and content type of a GET answer that is not JSON."""
        with self._open("GET", path, params, headers={"Accept": "*/*"}) as response:
            return response.read(), response.headers.get("Content-Type", "application/octet-stream")

    def version(self) -> dict:
        """Return the server's product name and version."""
        return self.request("GET", "version")

    # datasets

    def _newest(self, kind: str, name: str, version: str | None) -> str:
        """Return `version`, or the newest version of a named dataset, algorithm or model."""
        if version:
            return version
        versions = self.request("GET", f"{kind}/{_quote(name)}")["versions"]
        if not versions:
            raise NotFound(f"{kind[:-1]} {name!r} has no versions")
        return max(versions, key=lambda row: row.get("created") or "")["version"]

    def datasets(self, q: str | None = None) -> list[dict]:
        """Return the project's datasets, optionally those matching a search."""
        return self.request("GET", "datasets", {"q": q})["datasets"]

    def dataset(self, name: str) -> dict:
        """Return a dataset with its versions."""
        return self.request("GET", f"datasets/{_quote(name)}")

    def dataset_version(self, name: str, version: str | None = None) -> dict:
        """Return one version of a dataset (the newest when None): parts, schema, records, size."""
        return self.request("GET", self._dataset_path(name, version))

    def _dataset_path(self, name: str, version: str | None) -> str:
        return f"datasets/{_quote(name)}/versions/{_quote(self._newest('datasets', name, version))}"

    def records(
        self,
        name: str,
        version: str | None = None,
        part: str | None = None,
        offset: int = 0,
        limit: int = 50,
        columns: list[str] | None = None,
    ) -> dict:
        """Return a page of records; bytes fields come as `{"$bytes": size, "contentType", "url"}`."""
        params = {
            "part": part,
            "offset": offset,
            "limit": limit,
            "columns": ",".join(columns) if columns else None,
        }
        return self.request("GET", f"{self._dataset_path(name, version)}/records", params)

    def field(
        self,
        name: str,
        version: str | None,
        index: int,
        field: str,
        part: str | None = None,
        thumbnail: int | None = None,
    ) -> tuple[bytes, str]:
        """Return one field of one record as (content, content type); `thumbnail` gives a small image."""
        path = f"{self._dataset_path(name, version)}/records/{int(index)}/fields/{_quote(field)}"
        return self.raw(path, {"part": part, "thumbnail": thumbnail})

    def dataset_stats(self, name: str, version: str | None = None, part: str | None = None) -> dict:
        """Return per-field statistics and per-class counts of a dataset version."""
        return self.request("GET", f"{self._dataset_path(name, version)}/stats", {"part": part})

    def upload_dataset(
        self,
        archive: str | os.PathLike,
        name: str,
        description: str = "",
        format: str = "import",
        part: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict:
        """Upload a zip/tar as a new dataset version; `progress(sent, total)` sees the bytes go."""
        params = {"name": name, "description": description, "format": format, "part": part}
        return self._upload("datasets", archive, params, progress)

    def delete_dataset(self, name: str, version: str | None = None) -> Any:
        """Delete a dataset, or one of its versions."""
        path = f"datasets/{_quote(name)}" + (f"/versions/{_quote(version)}" if version else "")
        return self.request("DELETE", path)

    def _upload(
        self, path: str, archive: str | os.PathLike, params: dict, progress: Callable[[int, int], None] | None
    ) -> dict:
        size = os.path.getsize(archive)
        with open(archive, "rb") as stream:
            body = _Progress(stream, size, progress)
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
            with self._open("POST", path, params, body, headers, timeout=max(self.timeout, 600)) as response:
                return json.loads(response.read())

    # algorithms and models

    def algorithms(self, q: str | None = None) -> list[dict]:
        """Return the project's algorithms, optionally those matching a search."""
        return self.request("GET", "algorithms", {"q": q})["algorithms"]

    def algorithm(self, name: str) -> dict:
        """Return an algorithm with its versions."""
        return self.request("GET", f"algorithms/{_quote(name)}")

    def algorithm_version(self, name: str, version: str | None = None) -> dict:
        """Return one algorithm version: functions, resources, inputs, outputs, parameters."""
        version = self._newest("algorithms", name, version)
        return self.request("GET", f"algorithms/{_quote(name)}/versions/{_quote(version)}")

    def upload_algorithm(
        self,
        archive: str | os.PathLike,
        name: str | None = None,
        description: str = "",
        progress: Callable[[int, int], None] | None = None,
    ) -> dict:
        """Upload an algorithm archive (zip/tar of a folder with environment.yml) as a new version."""
        return self._upload("algorithms", archive, {"name": name, "description": description}, progress)

    def delete_algorithm(self, name: str, version: str | None = None) -> Any:
        """Delete an algorithm, or one of its versions."""
        path = f"algorithms/{_quote(name)}" + (f"/versions/{_quote(version)}" if version else "")
        return self.request("DELETE", path)

    def models(self, q: str | None = None) -> list[dict]:
        """Return the project's models, optionally those matching a search."""
        return self.request("GET", "models", {"q": q})["models"]

    def model(self, name: str) -> dict:
        """Return a model with its versions."""
        return self.request("GET", f"models/{_quote(name)}")

    def model_version(self, name: str, version: str | None = None) -> dict:
        """Return one model version with its lineage."""
        version = self._newest("models", name, version)
        return self.request("GET", f"models/{_quote(name)}/versions/{_quote(version)}")

    def upload_model(
        self,
        path: str | os.PathLike,
        name: str,
        description: str = "",
        filename: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> dict:
        """Upload a model file (stored as `filename`), or a zip/tar of its folder, as a new version."""
        params = {"name": name, "description": description, "filename": filename or Path(path).name}
        return self._upload("models", path, params, progress)

    def model_alias(self, name: str, alias: str) -> dict:
        """Return the model version `NAME@ALIAS` points at."""
        return self.request("GET", f"models/{_quote(name)}/aliases/{_quote(alias)}")

    def set_model_alias(self, name: str, alias: str, version: str | None = None) -> dict:
        """Point `NAME@ALIAS` at a version (default: the latest); return the model with its aliases."""
        body = {"version": version} if version else {}
        return self.request("PUT", f"models/{_quote(name)}/aliases/{_quote(alias)}", body=body)

    def delete_model_alias(self, name: str, alias: str) -> dict:
        """Remove `NAME@ALIAS`; return the model with the aliases left."""
        return self.request("DELETE", f"models/{_quote(name)}/aliases/{_quote(alias)}")

    def model_structure(self, name: str, version: str | None = None) -> dict:
        """Return a model version's files with their layers or ops, parameter counts and shapes."""
        version = self._newest("models", name, version)
        return self.request("GET", f"models/{_quote(name)}/versions/{_quote(version)}/structure")

    # deployments

    def deployments(self) -> list[dict]:
        """Return the project's deployments with their state and replicas."""
        return self.request("GET", "deployments")["deployments"]

    def deployment(self, name: str) -> dict:
        """Return one deployment with its replicas and request metrics per model version."""
        return self.request("GET", f"deployments/{_quote(name)}")

    def deploy(self, name: str, model: str, replicas: int = 1, algorithm: str | None = None) -> dict:
        """Deploy a model version (NAME or NAME:VERSION) as an HTTP API; its replicas start at once."""
        body = {"name": name, "model": model, "replicas": replicas, "algorithm": algorithm}
        return self.request("POST", "deployments", body=body)

    def predict(
        self,
        name: str,
        data: bytes | str | Path,
        content_type: str | None = None,
        headers: dict | None = None,
    ) -> dict:
        """Send bytes or a file to a deployment; return its JSON answer with `model_version` added."""
        if not isinstance(data, bytes):
            path = Path(data)
            content_type = content_type or mimetypes.guess_type(path.name)[0]
            data = path.read_bytes()
        sent = {"Content-Type": content_type or "application/octet-stream", **(headers or {})}
        with self._open("POST", f"deployments/{_quote(name)}/predict", body=data, headers=sent) as response:
            answer = json.loads(response.read())
            answer["model_version"] = response.headers.get("X-KPL-Model-Version")
        return answer

    def canary(
        self,
        name: str,
        model: str,
        weight: int,
        algorithm: str | None = None,
        sticky_header: str | None = None,
        replicas: int = 1,
    ) -> dict:
        """Serve a canary model version to `weight` percent of a deployment's requests."""
        body = {
            "model": model,
            "weight": weight,
            "algorithm": algorithm,
            "sticky_header": sticky_header,
            "replicas": replicas,
        }
        return self.request("POST", f"deployments/{_quote(name)}/canary", body=body)

    def promote(self, name: str, timeout: float = 300.0) -> dict:
        """Make the canary production once its replicas are ready (waits up to `timeout` seconds)."""
        path = f"deployments/{_quote(name)}/promote"
        with self._open("POST", path, timeout=self.timeout + timeout) as response:
            return json.loads(response.read())

    def deployment_logs(self, name: str, lines: int = 100) -> list[dict]:
        """Return the last `lines` lines of each replica's output."""
        return self.request("GET", f"deployments/{_quote(name)}/logs", {"lines": lines})["logs"]

    def delete_deployment(self, name: str) -> Any:
        """Stop a deployment and free its resources."""
        return self.request("DELETE", f"deployments/{_quote(name)}")

    def deployment_metrics(self, name: str, since: str | None = None) -> dict:
        """Return a deployment's request metrics per model version over time (default: the last hour)."""
        return self.request("GET", f"deployments/{_quote(name)}/metrics", {"since": since} if since else None)

    def deployment_keys(self, name: str) -> list[dict]:
        """Return a deployment's API keys (ids and first characters, never the keys)."""
        return self.request("GET", f"deployments/{_quote(name)}/keys")["keys"]

    def create_deployment_key(self, name: str) -> dict:
        """Make an API key that opens this deployment's predict only; `key` is shown this once."""
        return self.request("POST", f"deployments/{_quote(name)}/keys")

    def revoke_deployment_key(self, name: str, key_id: str) -> Any:
        """Revoke an API key of a deployment."""
        return self.request("DELETE", f"deployments/{_quote(name)}/keys/{_quote(key_id)}")

    def delete_model(self, name: str, version: str | None = None) -> Any:
        """Delete a model, or one of its versions."""
        path = f"models/{_quote(name)}" + (f"/versions/{_quote(version)}" if version else "")
        return self.request("DELETE", path)

    # jobs

    def jobs(self, state: str | None = None) -> list[dict]:
        """Return the project's jobs, newest first, optionally in one state."""
        return self.request("GET", "jobs", {"state": state})["jobs"]

    def job(self, job_id: str) -> dict:
        """Return one job."""
        return self.request("GET", f"jobs/{_quote(job_id)}")

    def submit(
        self,
        algorithm: str,
        function: str = "train",
        inputs: dict[str, str] | None = None,
        parameters: dict[str, Any] | None = None,
        resources: dict[str, Any] | None = None,
        priority: int = 0,
    ) -> dict:
        """Submit a job running one function of an algorithm; return the new job."""
        body: dict[str, Any] = {
            "algorithm": algorithm,
            "function": function,
            "inputs": inputs or {},
            "parameters": parameters or {},
            "priority": priority,
        }
        if resources:
            body["resources"] = resources
        return self.request("POST", "jobs", body=body)

    def stop(self, job_id: str) -> dict:
        """Stop a job; return it."""
        return self.request("POST", f"jobs/{_quote(job_id)}/stop")

    def rerun(self, job_id: str) -> dict:
        """Run a job again as it was; return the new job."""
        return self.request("POST", f"jobs/{_quote(job_id)}/rerun")

    def copy(self, job_id: str, parameters: dict | None = None, resources: dict | None = None) -> dict:
        """Run a copy of a job with changed parameters or resources; return the new job."""
        body = {key: value for key, value in (("parameters", parameters), ("resources", resources)) if value}
        return self.request("POST", f"jobs/{_quote(job_id)}/copy", body=body)

    def resume(self, job_id: str, parameters: dict | None = None) -> dict:
        """Resume a job from its checkpoint; return the new job."""
        return self.request("POST", f"jobs/{_quote(job_id)}/resume", body={"parameters": parameters or {}})

    def logs(
        self, job_id: str, offset: int = 0, limit: int | None = None, wait: int | None = None, worker: int = 0
    ) -> dict:
        """Return a chunk of the job's output from byte `offset`: text, next_offset, done, state.

        With `wait`, a request finding nothing new waits up to that many seconds for output.
        `worker` picks a worker's log in a job of several workers.
        """
        params = {"offset": offset, "limit": limit, "wait": wait, "worker": worker or None}
        timeout = self.timeout + (wait or 0)
        with self._open("GET", f"jobs/{_quote(job_id)}/logs", params, timeout=timeout) as response:
            return json.loads(response.read())

    def follow_logs(self, job_id: str, offset: int = 0, worker: int = 0) -> Iterator[str]:
        """Yield the job's output as it is written, until the job has ended and all is read."""
        while True:
            chunk = self.logs(job_id, offset, wait=FOLLOW_WAIT_SECONDS, worker=worker)
            if chunk["text"]:
                yield chunk["text"]
            if chunk["done"]:
                return
            offset = chunk["next_offset"]

    def metrics(self, job_id: str, max_points: int = 1000) -> dict:
        """Return a job's metrics: `figures` (figure -> series -> [x, y] points, at most `max_points`)."""
        return self.request("GET", f"jobs/{_quote(job_id)}/metrics", {"max_points": max_points})

    def progress(self, job_id: str) -> dict:
        """Return a job's `state`, `progress` (fraction done) and `eta_seconds` left (None when unknown)."""
        return self.request("GET", f"jobs/{_quote(job_id)}/progress")

    def usage(self, job_id: str) -> dict:
        """Return the live resource use of a running job."""
        return self.request("GET", f"jobs/{_quote(job_id)}/usage")

    def devices(self) -> dict:
        """Return the machine's capacity, its accelerators and what is in use."""
        return self.request("GET", "devices")

    def quota(self) -> dict:
        """Return the project's quota: {"project", "quota": {cpu, memory, gpu, npu, notebooks}} (null: not limited)."""
        return self.request("GET", "quota")

    def set_quota(self, quota: dict) -> dict:
        """Replace the project's quota (administrators); every next reservation decides with it."""
        return self.request("PUT", "quota", body=quota)

    # pipelines

    def validate_pipeline(self, text: str) -> dict:
        """Return each node's schemas and every problem of a pipeline file's text."""
        return self.request("POST", "pipelines/validate", body={"text": text})

    def pipeline_node_types(self) -> list[dict]:
        """Return the node types a pipeline may use: category, description, inputs, parameters' JSON schema."""
        return self.request("GET", "pipelines/node-types")["node_types"]

    def run_pipeline(
        self, text: str, path: str = "", from_node: str | None = None, fresh: bool = False
    ) -> dict:
        """Start a run of a pipeline file's text on the server; return the run."""
        body = {"text": text, "path": path, "from_node": from_node, "fresh": fresh}
        return self.request("POST", "pipelines/runs", body=body)

    def pipeline_runs(self, limit: int = 50) -> list[dict]:
        """Return the project's pipeline runs, newest first."""
        return self.request("GET", "pipelines/runs", {"limit": limit})["runs"]

    def pipeline_run(self, run_id: str) -> dict:
        """Return one pipeline run with its nodes."""
        return self.request("GET", f"pipelines/runs/{_quote(run_id)}")

    def stop_pipeline_run(self, run_id: str) -> dict:
        """Stop a pipeline run; return it."""
        return self.request("POST", f"pipelines/runs/{_quote(run_id)}/stop")

    def pipeline_records(self, run_id: str, node: str, port: str | None = None, limit: int = 10) -> dict:
        """Return the first records and fields of a node's output in a run."""
        return self.request(
            "GET",
            f"pipelines/runs/{_quote(run_id)}/nodes/{_quote(node)}/records",
            {"port": port, "limit": limit},
        )

    # annotation

    def annotation_tasks(self) -> list[dict]:
        """Return the project's annotation tasks, newest first, with their progress."""
        return self.request("GET", "annotation/tasks")["tasks"]

    def project_members(self) -> list[str] | None:
        """Return the project's members, whom tasks name as annotators and reviewers (None: no directory)."""
        return self.request("GET", "annotation/tasks")["members"]

    def create_annotation_task(
        self,
        name: str,
        dataset: str,
        kind: str,
        classes: list[str | dict],
        keypoints: list[str] | None = None,
        skeleton: list[tuple[int, int]] | None = None,
        parts: list[str] | None = None,
        limit: int | None = None,
        content_field: str | None = None,
        assignees: list[str] | None = None,
        reviewers: list[str] | None = None,
        description: str = "",
    ) -> dict:
        """Create a labelling task on a dataset version (`kind`: image_class, boxes, polygons, masks,
        keypoints, ocr, text_class or audio_class); a class is a name or {"name", "children", "color"}."""
        body = {
            "name": name,
            "dataset": dataset,
            "kind": kind,
            "label_schema": {
                "classes": [{"name": c} if isinstance(c, str) else c for c in classes],
                "keypoints": list(keypoints or []),
                "skeleton": [list(pair) for pair in skeleton or []],
            },
            "parts": parts,
            "limit": limit,
            "content_field": content_field,
            "assignees": list(assignees or []),
            "reviewers": list(reviewers or []),
            "description": description,
        }
        return self.request("POST", "annotation/tasks", body=body)

    def annotation_task(self, name: str) -> dict:
        """Return a task with its progress per state and per person."""
        return self.request("GET", f"annotation/tasks/{_quote(name)}")

    def update_annotation_task(self, name: str, **changes: Any) -> dict:
        """Change a task's `description`, `assignees`, `reviewers` or `label_schema` (keeping every class)."""
        return self.request("PATCH", f"annotation/tasks/{_quote(name)}", body=changes)

    def delete_annotation_task(self, name: str) -> dict:
        """Delete a task with its labels, history and suggestions."""
        return self.request("DELETE", f"annotation/tasks/{_quote(name)}")

    def annotation_queue(
        self,
        name: str,
        state: str = "unlabelled",
        order: str = "record",
        mine: bool = False,
        after: str | None = None,
        limit: int = 50,
    ) -> dict:
        """Return a page of a task's records (`state`: unlabelled, labelled, accepted, rejected or all;
        `order`: record or uncertainty); pass its `next` as `after` for the next page."""
        params = {"state": state, "order": order, "mine": 1 if mine else None, "after": after, "limit": limit}
        return self.request("GET", f"annotation/tasks/{_quote(name)}/queue", params)

    def annotation_record(self, name: str, record: int) -> dict:
        """Return a record of a task: its fields (bytes as URLs), its label and its suggestion."""
        return self.request("GET", f"annotation/tasks/{_quote(name)}/records/{int(record)}")

    def save_label(
        self, name: str, record: int, value: dict, version: int, suggestion_run: int | None = None
    ) -> dict:
        """Save a record's label over the `version` you loaded (0: it had none); 409 when someone saved since."""
        body = {"value": value, "version": version, "suggestion_run": suggestion_run}
        return self.request("PUT", f"annotation/tasks/{_quote(name)}/records/{int(record)}/label", body=body)

    def review_label(self, name: str, record: int, decision: str, version: int, comment: str = "") -> dict:
        """Accept or reject (`decision`) a record's label at the `version` you reviewed."""
        body = {"decision": decision, "version": version, "comment": comment}
        return self.request(
            "POST", f"annotation/tasks/{_quote(name)}/records/{int(record)}/review", body=body
        )

    def label_history(self, name: str, record: int) -> list[dict]:
        """Return every save, import and review of a record's label, oldest first."""
        return self.request("GET", f"annotation/tasks/{_quote(name)}/records/{int(record)}/history")["events"]

    def publish_annotation(
        self, name: str, dataset: str, test_fraction: float = 0.2, seed: int = 0, description: str = ""
    ) -> dict:
        """Publish a task's accepted labels as a new version of `dataset`, split into train and test parts."""
        body = {"dataset": dataset, "test_fraction": test_fraction, "seed": seed, "description": description}
        return self.request("POST", f"annotation/tasks/{_quote(name)}/publish", body=body)

    def export_annotation(self, name: str, format: str, path: str | os.PathLike, every: bool = False) -> str:
        """Write a task's accepted labels (`every`: every saved label) to the zip `path` in `format`:
        coco, voc, yolo or labelme; return the path."""
        data, _ = self.raw(
            f"annotation/tasks/{_quote(name)}/export", {"format": format, "all": 1 if every else None}
        )
        with open(path, "wb") as out:
            out.write(data)
        return os.fspath(path)

    def import_annotation(self, name: str, format: str, archive: str | os.PathLike) -> dict:
        """Label a task's unlabelled records from a zip or tar of `format` (coco, voc, yolo or labelme)."""
        return self._upload(f"annotation/tasks/{_quote(name)}/import", archive, {"format": format}, None)

    # experiments

    def compare(self, job_ids: list[str]) -> dict:
        """Return two or more jobs side by side (parameters that differ, metrics, inputs, time, memory)."""
        return self.request("GET", "comparisons", {"ids": ",".join(job_ids)})

    def experiments(self) -> list[dict]:
        """Return the project's experiments, newest first."""
        return self.request("GET", "experiments")["experiments"]

    def experiment(self, name: str) -> dict:
        """Return one experiment with its trials and best trial."""
        return self.request("GET", f"experiments/{_quote(name)}")

    def create_experiment(self, body: dict) -> dict:
        """Check and create an experiment (see `kpl_lab.experiment.Experiment`); its first trials start."""
        return self.request("POST", "experiments", body=body)

    def stop_experiment(self, name: str) -> dict:
        """Stop an experiment and its running trials."""
        return self.request("POST", f"experiments/{_quote(name)}/stop")

    def resume_experiment(self, name: str, trials: int | None = None, seconds: float | None = None) -> dict:
        """Resume a stopped experiment, or a finished one with a larger budget."""
        body = {key: value for key, value in (("trials", trials), ("seconds", seconds)) if value is not None}
        return self.request("POST", f"experiments/{_quote(name)}/resume", body=body)

    def experiment_plot(self, name: str, kind: str) -> dict:
        """Return Optuna's `history`, `importance` or `parallel` plot of an experiment as a Plotly figure."""
        return self.request("GET", f"experiments/{_quote(name)}/plots/{_quote(kind)}")
