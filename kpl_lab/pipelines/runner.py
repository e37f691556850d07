"""Runs: nodes in parallel as their inputs are ready, results reused from the cache, history in the catalog.

A run is checked once, when it is recorded: its record keeps the checked pipeline
(`Validation.to_record`), and executing it, in this process or another, runs that, never
parsing or checking the file again. Each node runs as its node type says (kpl_lab/pipelines/nodes).
"""

from __future__ import annotations

import os
import secrets
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import psutil
import traitlets
from sqlalchemy import select
from traitlets import Float, Integer, TraitError, Unicode
from traitlets.config import LoggingConfigurable

from ..catalog.models import utcnow
from ..catalog.pipelines import PipelineNodeRun, PipelineRun
from ..errors import BadRequest, Conflict, KPLError, NotFound
from ..sandbox.pool import Stopped as SandboxStopped
from . import cache, fuse
from .format import PipelineSyntaxError, Spec, parse
from .nodes import PlatformNode, Result, Step
from .processors import Settings, Source, Stopped
from .schema import PORT
from .validate import PlatformCatalog, Validation, validate

SANDBOX_MARGIN_SECONDS = 60.0  # a unit's reading and writing beside its query's time limit
UNLIMITED_SECONDS = 7 * 24 * 3600.0  # a unit with no query time limit: a week
FINAL = ("succeeded", "failed", "stopped")
BACKENDS = ("local", "ray")
Progress = Callable[[str, str, str], None]  # (node, state, message)


_MATERIALISING = threading.Lock()  # fused nodes' outputs written on request (see records)


def _shown(value: Any) -> Any:
    """Return a record value as JSON: bytes as {"$bytes": size} (their content stays on the server)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": len(value)}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    return value


class PipelineRunner(LoggingConfigurable):
    """Start, follow and stop pipeline runs of one platform."""

    workers = Integer(4, help="Nodes of one run that may run at the same time.").tag(config=True)
    memory_limit = Unicode(
        "",
        help="Memory the query engine may use per node before it spills to disk, e.g. '2GB' (default: its own).",
    ).tag(config=True)
    threads = Integer(0, min=0, help="Threads the query engine uses per node (0: one per core).").tag(
        config=True
    )
    query_time_limit = Float(
        3600.0,
        min=0,
        help="Seconds a node's query may run before it is interrupted and the node fails (0: no limit).",
    ).tag(config=True)
    spill_directory = Unicode(
        "",
        help="Where the query engine spills (every project's sandbox account must write there); default: "
        "beside the node's output, in the project's staging folder.",
    ).tag(config=True)

    backend = Unicode(
        "local",
        help="Where processors run: 'local' (DuckDB and pyarrow in this process) or 'ray' (Ray Data; "
        "the cluster at ray_address, else RAY_ADDRESS, else a local Ray).",
    ).tag(config=True)
    ray_address = Unicode("", help="The Ray cluster of the ray backend, e.g. 'ray://head:10001'.").tag(
        config=True
    )

    @traitlets.validate("backend")
    def _check_backend(self, proposal: Any) -> str:
        if proposal["value"] not in BACKENDS:
            raise TraitError(
                f"PipelineRunner.backend: {proposal['value']!r} is no pipeline backend (one of {', '.join(BACKENDS)})"
            )
        return proposal["value"]

    arrow_allocator = Unicode(
        "system",
        help="pyarrow's allocator in a process that runs pipelines: 'system' (malloc) gives freed "
        "memory back at once, which keeps a run's peak low; '' keeps pyarrow's default (mimalloc).",
    ).tag(config=True)

    def __init__(self, platform: Any, settings: Settings | None = None, **kwargs: Any):
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.settings = settings or Settings(
            self.memory_limit or None,
            self.spill_directory or None,
            self.threads,
            self.query_time_limit,
            self.arrow_allocator,
        )

    # history

    def cache(self, project: str) -> cache.Cache:
        """Return the project's node cache: in its folder, where its sandboxed workers read it."""
        folder = self.platform.storage.project_dir(project)
        return cache.Cache(folder / "pipelines" / "cache", folder / ".staging")

    def get(self, project: str, run_id: str) -> PipelineRun:
        with self.platform.session() as session:
            run = session.get(PipelineRun, run_id)
            if run is None or run.project.name != project:
                raise NotFound(f"pipeline run {run_id!r} not found in project {project!r}")
        return self._reap(run)

    def _reap(self, run: PipelineRun) -> PipelineRun:
        """Mark failed a run whose process ended without finishing it (a server restart, a kill)."""
        if run.state != "running" or run.pid is None or psutil.pid_exists(run.pid):
            return run
        return self._end(run.project.name, run.id, "failed", f"the process running it (pid {run.pid}) ended")

    def list(self, project: str, limit: int = 50) -> list[PipelineRun]:
        from ..catalog.models import Project

        with self.platform.session() as session:
            query = (
                select(PipelineRun)
                .join(Project)
                .where(Project.name == project)
                .order_by(PipelineRun.created.desc())
                .limit(limit)
            )
            runs = list(session.scalars(query))
        return [self._reap(run) for run in runs]

    def stop(self, project: str, run_id: str) -> PipelineRun:
        """Ask a running pipeline to stop: running nodes end, their jobs are stopped."""
        with self.platform.session(immediate=True) as session:
            run = session.get(PipelineRun, run_id)
            if run is None or run.project.name != project:
                raise NotFound(f"pipeline run {run_id!r} not found in project {project!r}")
            if run.state in FINAL:
                raise Conflict(f"pipeline run {run_id} already {run.state}")
            run.stop_requested = True
        return self.get(project, run_id)

    def records(
        self, project: str, run_id: str, node_id: str, port: str | None = None, limit: int = 10
    ) -> dict:
        """Return the first records of a node's output in a run: {port, total, fields, records}."""
        from kpl_dataset import KPLDatasetError, ReadOnlyDataset

        from .schema import describe

        run = self.get(project, run_id)
        node = next((n for n in run.nodes if n.node == node_id), None)
        if node is None:
            raise NotFound(f"node {node_id!r} is not in pipeline run {run_id}")
        outputs = node.outputs or {}
        if not outputs and node.log.startswith("fused into") and node.state in ("succeeded", "cached"):
            outputs = {PORT: self._materialise(project, run, node_id)}
        if not outputs:
            raise BadRequest(f"node {node_id} has no output in run {run_id} ({node.state})", field="node")
        if port is None and len(outputs) > 1:
            raise BadRequest(f"port: node {node_id} has several outputs: {', '.join(outputs)}", field="port")
        port = port or next(iter(outputs))
        out = outputs.get(port)
        if out is None:
            raise NotFound(f"node {node_id} has no output {port!r} (outputs: {', '.join(outputs)})")
        if (out.get("ref") or "").startswith("model:"):
            raise BadRequest(
                f"output {node_id}.{port} is a model ({out['ref']}): it has no records", field="port"
            )
        try:
            reader = ReadOnlyDataset(self.platform.storage.absolute(out["path"]), out.get("part") or "root")
        except KPLDatasetError as err:
            raise NotFound(f"output {node_id}.{port} of run {run_id} is gone ({err})") from None
        rows = reader[: max(0, min(limit, len(reader)))]
        return {
            "port": port,
            "total": len(reader),
            "fields": describe(reader.arrow_schema),
            "records": [{k: _shown(v) for k, v in r.items()} for r in rows],
        }

    def _materialise(self, project: str, run: PipelineRun, node_id: str) -> dict:
        """Write a fused node's output now, as `keep: true` would have (into the cache: once); return it."""
        from kpl_dataset import KPLDatasetError

        checked = self.checked(project, run)
        if not checked.ok:
            raise BadRequest(
                f"node {node_id}: the pipeline no longer validates ({'; '.join(map(str, checked.problems))})",
                field="node",
            )
        unwritten = fuse.unwritten(checked)
        results: dict[str, Result] = {}
        for row in run.nodes:
            if row.node in unwritten:
                results[row.node] = Result(
                    {PORT: {"fused": row.node, "content": row.cache_key, "rows": None}}
                )
            elif row.outputs:
                results[row.node] = Result(
                    {
                        port: {
                            "folder": str(self.platform.storage.absolute(out["path"])),
                            "part": out.get("part") or "root",
                            "rows": out.get("rows"),
                        }
                        for port, out in row.outputs.items()
                        if out.get("path")
                    }
                )
        unit = fuse.unit(checked, node_id, unwritten - {node_id})
        for member in unit.members:
            for src, _ in checked.nodes[member].edges.values():
                if src not in unit.members and (src not in results or not results[src].outputs):
                    raise NotFound(f"output of node {node_id} cannot be made: its input {src} has no output")
        key = next(r.cache_key for r in run.nodes if r.node == node_id)
        try:
            with _MATERIALISING:  # one at a time: a second request for the same node finds it cached
                result, _, _ = self._fused(
                    project, checked, unit, key, results, False, threading.Event(), lambda _: None
                )
        except KPLDatasetError as err:
            raise NotFound(f"output of node {node_id} cannot be made: an input is gone ({err})") from None
        return self._port(result, PORT)

    # running

    def validate(self, project: str, spec: Spec) -> Validation:
        return validate(spec, PlatformCatalog(self.platform, project))

    def checked(self, project: str, run: PipelineRun) -> Validation:
        """Return the checked pipeline a run keeps (a run recorded before runs kept it: its file checked now)."""
        if run.checked is not None:
            return Validation.from_record(run.checked)
        return self.validate(project, parse(run.file))

    def create(
        self,
        project: str,
        text: str,
        path: str = "",
        from_node: str | None = None,
        fresh: bool = False,
        user: str = "",
    ) -> str:
        """Validate a pipeline and record a new run of it; refuse one with problems."""
        try:
            spec = parse(text)
        except PipelineSyntaxError as error:
            raise BadRequest(f"the text is no pipeline: {error}", field="text") from None
        checked = self.validate(project, spec)
        if not checked.ok:
            raise BadRequest(
                "the pipeline has problems: " + "; ".join(map(str, checked.problems)),
                errors=[
                    (".".join(x for x in (p.node, p.parameter) if x) or "pipeline", p.message)
                    for p in checked.problems
                ],
            )
        if from_node is not None and from_node not in spec.nodes:
            raise BadRequest(f"from: node {from_node!r} is not in the pipeline", field="from")
        run_id = secrets.token_hex(6)
        with self.platform.session(immediate=True) as session:
            proj = self.platform.catalog.ensure_project(session, project)
            run = PipelineRun(
                id=run_id,
                project_id=proj.id,
                name=spec.name,
                file=text,
                path=path,
                user=user,
                from_node=from_node,
                fresh=fresh,
                state="running",
                checked=checked.to_record(),
            )
            run.nodes = [PipelineNodeRun(node=n, type=checked.nodes[n].type) for n in checked.order]
            session.add(run)
        return run_id

    def rerun(self, project: str, run_id: str, from_node: str | None = None, fresh: bool = False) -> str:
        """Record a new run of the file an earlier run ran (all of it fresh, or from one node)."""
        old = self.get(project, run_id)
        return self.create(project, old.file, old.path, from_node=from_node, fresh=fresh, user=old.user)

    def execute(self, project: str, run_id: str, progress: Progress | None = None) -> PipelineRun:
        """Run a recorded run to its end in this process; return it finished."""
        run = self.get(project, run_id)
        with self.platform.session(immediate=True) as session:
            session.get(PipelineRun, run_id).pid = os.getpid()
        try:
            checked = self.checked(project, run)
            if not checked.ok:  # a run recorded before runs kept their checked pipeline, checked now
                return self._end(project, run_id, "failed", "; ".join(map(str, checked.problems)))
            if self.backend == "ray":
                from . import ray_backend

                ray_backend.connect(self.ray_address)  # here, not in a node's thread: Ray starts once
            return self._execute(project, run_id, run, checked, progress)
        except Exception as err:
            self._end(project, run_id, "failed", f"{type(err).__name__}: {err}")
            raise

    def _end(self, project: str, run_id: str, state: str, reason: str) -> PipelineRun:
        with self.platform.session(immediate=True) as session:
            row = session.get(PipelineRun, run_id)
            row.state, row.finished, row.reason = state, utcnow(), reason
            for node in row.nodes:
                if node.state in ("pending", "running"):
                    node.state = "skipped"
        return self.get(project, run_id)

    def _execute(
        self, project: str, run_id: str, run: PipelineRun, checked: Validation, progress
    ) -> PipelineRun:
        forced = self._forced(checked, run.from_node, run.fresh)
        # on Ray every node is written: its per-batch work runs there, not in one query on the driver
        unwritten = set() if self.backend == "ray" else fuse.unwritten(checked)
        stop = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(run_id, stop), daemon=True)
        watcher.start()
        results: dict[str, Result] = {}
        failed: set[str] = set()
        pending = list(checked.order)
        running: dict[Future, str] = {}
        note = progress or (lambda node, state, message: None)
        try:
            with ThreadPoolExecutor(self.workers, thread_name_prefix=f"pipeline-{run_id}") as pool:
                while pending or running:
                    for node_id in list(pending):
                        ups = checked.upstream(node_id)
                        if any(u in failed for u in ups) or (stop.is_set() and not running):
                            pending.remove(node_id)
                            failed.add(node_id)
                            state = "stopped" if stop.is_set() else "skipped"
                            self.set_node(
                                run_id,
                                node_id,
                                state=state,
                                log=f"{state}: an input did not finish" if state == "skipped" else "stopped",
                            )
                            note(node_id, state, "")
                        elif all(u in results for u in ups) and not stop.is_set():
                            pending.remove(node_id)
                            running[
                                pool.submit(
                                    self._run_node,
                                    project,
                                    run_id,
                                    checked,
                                    node_id,
                                    results,
                                    forced,
                                    stop,
                                    note,
                                    unwritten,
                                )
                            ] = node_id
                    if not running:
                        continue
                    done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    for future in done:
                        node_id = running.pop(future)
                        result = future.result()
                        if result is None:
                            failed.add(node_id)
                        else:
                            results[node_id] = result
        finally:
            stop_requested = self.get(project, run_id).stop_requested
            stop.set()
            watcher.join()
        state = "stopped" if stop_requested else ("failed" if failed else "succeeded")
        with self.platform.session(immediate=True) as session:
            row = session.get(PipelineRun, run_id)
            row.state, row.finished = state, utcnow()
            left = [n for n in row.nodes if n.state in ("pending", "running")]
            for node in left:  # fused into a query that never ran
                node.state = "stopped" if stop_requested else "skipped"
            bad = [n.node for n in row.nodes if n.state == "failed"]
            row.reason = f"failed nodes: {', '.join(bad)}" if bad else ""
            left = [(n.node, n.state) for n in left]
        for node_id, node_state in left:
            note(node_id, node_state, "")
        return self.get(project, run_id)

    def run(
        self, project: str, text: str, path: str = "", progress: Progress | None = None, **options: Any
    ) -> PipelineRun:
        """Record and execute a run; return it finished."""
        return self.execute(project, self.create(project, text, path, **options), progress)

    def _watch(self, run_id: str, stop: threading.Event) -> None:
        while not stop.wait(0.3):
            with self.platform.session() as session:
                if session.get(PipelineRun, run_id).stop_requested:
                    stop.set()

    @staticmethod
    def _forced(checked: Validation, from_node: str | None, fresh: bool) -> set[str]:
        """Return the nodes that must run even when cached: all when fresh, from_node and after it when named."""
        if fresh:
            return set(checked.order)
        if from_node is None:
            return set()
        forced = {from_node}
        for node_id in checked.order:
            if any(u in forced for u in checked.upstream(node_id)):
                forced.add(node_id)
        return forced

    def set_node(self, run_id: str, node_id: str, **values: Any) -> None:
        """Set fields of one node of a run (its state, log, job)."""
        self._nodes(run_id, {node_id: values})

    def _nodes(self, run_id: str, updates: dict[str, dict[str, Any]]) -> None:
        """Set fields of several nodes of a run in one transaction (a unit's nodes change together)."""
        with self.platform.session(immediate=True) as session:
            rows = session.scalars(
                select(PipelineNodeRun).where(
                    PipelineNodeRun.run_id == run_id, PipelineNodeRun.node.in_(list(updates))
                )
            )
            for row in rows:
                for name, value in updates[row.node].items():
                    setattr(row, name, value)

    def _run_node(
        self, project, run_id, checked, node_id, results, forced, stop, note, unwritten
    ) -> Result | None:
        node = checked.nodes[node_id]
        lines: list[str] = []
        log = lines.append
        members: list[str] = []  # the unwritten nodes whose work this node's query does
        counts: dict[str, int | None] = {}
        try:
            inputs = {param: self._port(results[src], port) for param, (src, port) in node.edges.items()}
            params = node.params.model_dump(mode="json")
            node_key = cache.key(
                node.type, node.node_type.version, params, {k: v["content"] for k, v in inputs.items()}
            )
            if node_id in unwritten:  # its work happens in the query of each written node reading it
                return Result({PORT: {"fused": node_id, "content": node_key, "rows": None}})
            fused = self._fused_here(node.node_type) or fuse.routed(checked, node_id, unwritten)
            unit = fuse.unit(checked, node_id, unwritten) if fused else None
            members = unit.members[:-1] if unit else []
            started = utcnow()
            self._nodes(run_id, {m: {"state": "running", "started": started} for m in [*members, node_id]})
            for member in [*members, node_id]:
                note(member, "running", "")
            if unit is not None:
                if self.backend == "ray":
                    log(f"ray: {node.type} runs in DuckDB on the driver (it has no Ray Data form)")
                result, cached, counts = self._fused(
                    project, checked, unit, node_key, results, node_id in forced, stop, log
                )
                job_id = None
            elif isinstance(node.node_type, PlatformNode):
                step = Step(
                    self, project, run_id, checked.name, node, node_key, inputs, node_id in forced, stop, log
                )
                result, cached, job_id = node.node_type.run(step)
            else:
                result, cached, job_id = self._processor(
                    project, node, node_key, inputs, node_id in forced, stop, log
                )
        except Stopped:
            for member in [*members, node_id]:
                self.set_node(
                    run_id, member, state="stopped", finished=utcnow(), log="\n".join([*lines, "stopped"])
                )
                note(member, "stopped", "")
            return None
        except Exception as err:  # a node's failure is recorded; the other branches go on
            message = err.message if isinstance(err, KPLError) else f"{type(err).__name__}: {err}"
            for member in members:
                self.set_node(
                    run_id, member, state="failed", finished=utcnow(), log=f"fused into {node_id}: {message}"
                )
                note(member, "failed", message)
            self.set_node(
                run_id, node_id, state="failed", finished=utcnow(), log="\n".join([*lines, message])
            )
            note(node_id, "failed", message)
            return None
        state = "cached" if cached else "succeeded"

        def rows_of(member: str, param: str) -> int | None:
            src, port = checked.nodes[member].edges[param]
            return counts[src] if src in counts else self._port(results[src], port).get("rows")

        updates = {}
        for member in members:
            rows_in = [rows_of(member, param) for param in checked.nodes[member].edges]
            updates[member] = {
                "state": state,
                "finished": utcnow(),
                "cache_key": self._port(results[member], None)["content"],
                "rows_in": None if None in rows_in else sum(rows_in),
                "rows_out": counts.get(member),
                "log": f"fused into the query of {node_id} (not written; `keep: true` writes it)",
                "outputs": {},
            }
        if unit is not None:
            rows = [rows_of(node_id, param) for param in node.edges]
            rows_in = None if None in rows else sum(rows)
        else:
            rows_in = sum(v["rows"] for v in inputs.values() if v.get("rows") is not None) if inputs else None
        counted = [v["rows"] for v in result.outputs.values() if v.get("rows") is not None]
        rows_out = sum(counted) if counted else None  # a job's model or report has no rows
        shown = {
            port: {k: v for k, v in out.items() if k in ("path", "part", "ref", "rows")}
            for port, out in result.outputs.items()
        }
        updates[node_id] = {
            "state": state,
            "finished": utcnow(),
            "cache_key": node_key,
            "rows_in": rows_in,
            "rows_out": rows_out,
            "log": "\n".join(lines),
            "outputs": shown,
            "job_id": job_id,
        }
        self._nodes(run_id, updates)
        for member, values in updates.items():
            note(member, state, f"{values['rows_out']} rows" if values["rows_out"] else "")
        return result

    def _fused(self, project, checked, unit, node_key, results, forced, stop, log):
        """Run (or reuse) a written relational node with the unwritten ones it reads through, as one query."""
        store = self.cache(project)
        keys = {m: self._port(results[m], None)["content"] for m in unit.members[:-1]}
        if not forced:
            hit = store.lookup(node_key)
            if hit is not None:
                log("cached: same types, parameters and input content; output verified")
                fused = hit.get("fused", {})
                counts = {m: fused.get(k) for m, k in keys.items()}
                return self._cached(store, node_key, hit), True, counts
        for member in unit.members:
            node = checked.nodes[member]
            for param, (src, port) in node.edges.items():
                if src not in keys:
                    out = self._port(results[src], port)
                    unit.inputs[(src, port)] = Source(
                        Path(out["folder"]), out["part"], node.inputs[param].schema, out.get("rows")
                    )
        if len(unit.members) > 1:
            log(f"one query for {', '.join(unit.members)}")
        staged = store.staging(node_key)
        try:
            written, counts = self._sandboxed(
                project, "unit", checked, unit, str(staged), stop=stop, log=log, what=f"node {unit.final}"
            )
            result = {
                "outputs": {port: {"rows": n, "content": content} for port, (n, content) in written.items()},
                "fused": {k: counts.get(m) for m, k in keys.items()},
            }
            final = store.publish(node_key, staged, result)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        return self._cached(store, node_key, result, final), False, counts

    @staticmethod
    def _port(result: Result, port: str | None) -> dict:
        if port is None or port not in result.outputs:
            return next(iter(result.outputs.values()))
        return result.outputs[port]

    def relative(self, folder: Path) -> str:
        """Return a folder as a path under the storage root (as run histories show it)."""
        return self.platform.storage.relative(folder)

    # how nodes run: fused units and processors here; the others by their node types (nodes/)

    def _processor(self, project, node, node_key, inputs, forced, stop, log):
        store = self.cache(project)
        if not forced:
            hit = store.lookup(node_key)
            if hit is not None:
                log("cached: same type, parameters and input content; output verified")
                return self._cached(store, node_key, hit), True, None
        staged = store.staging(node_key)
        try:
            sources = {
                param: Source(Path(v["folder"]), v["part"], node.inputs[param].schema)
                for param, v in inputs.items()
            }
            outputs = {port: out.schema for port, out in node.outputs.items()}
            if self.backend == "ray":  # on the Ray cluster's workers (docs/pipelines.md#the-ray-backend)
                from . import ray_backend

                rows = ray_backend.run(
                    node.node_type, node.params, sources, outputs, staged, stop, log, self.settings
                )
                written = {port: [n, cache.content(staged / port)] for port, n in rows.items()}
            else:
                written = self._sandboxed(
                    project,
                    "processor",
                    node.node_type,
                    node.params,
                    sources,
                    outputs,
                    str(staged),
                    stop=stop,
                    log=log,
                    what=f"node {node.id}",
                )
            result = {
                "outputs": {port: {"rows": n, "content": content} for port, (n, content) in written.items()}
            }
            final = store.publish(node_key, staged, result)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        return self._cached(store, node_key, result, final), False, None

    def _fused_here(self, node_type: Any) -> bool:
        """Return whether a node runs in a unit's query (a relational one; on Ray, one without a Ray form)."""
        return node_type.fused and (self.backend != "ray" or node_type.on_ray is None)

    def _sandboxed(self, project: str, work: str, *args: Any, stop, log, what: str) -> Any:
        """Run `kpl_lab.pipelines.work:<work>` in the project's sandboxed worker, its staged folder given to it.

        The folder (the last positional argument) is the worker's while it writes, the platform's
        again before it is published; a stop kills the worker.
        """
        sandbox, staged = self.platform.sandbox, Path(args[-1])
        sandbox.give(project, staged)
        limit = self.settings.time_limit
        try:
            answer = sandbox.call(
                project,
                f"kpl_lab.pipelines.work:{work}",
                *args,
                self.settings,
                stop=stop,
                log=log,
                what=what,
                timeout=limit + SANDBOX_MARGIN_SECONDS if limit else UNLIMITED_SECONDS,
            )
        except SandboxStopped:
            raise Stopped from None
        finally:
            sandbox.adopt(project, staged)
        return answer

    def _cached(self, store: cache.Cache, node_key: str, hit: dict, final: Path | None = None) -> Result:
        final = final or store.folder(node_key)
        return Result(
            {
                port: {
                    "folder": str(final / port),
                    "part": "root",
                    "ref": None,
                    "rows": out["rows"],
                    "content": out["content"],
                    "path": self.relative(final / port),
                }
                for port, out in hit["outputs"].items()
            }
        )

    def _exists(self, project: str, ref: str | None) -> bool:
        if not ref:
            return False
        kind, _, rest = ref.partition(":")
        try:
            row = (
                self.platform.catalog.get_dataset(project, rest)
                if kind == "dataset"
                else self.platform.catalog.get_model(project, rest)
            )
        except KPLError:
            return False
        return self.platform.catalog.path(row).exists()

    def remembered(self, step: Step) -> dict | None:
        """Return the outputs a node registered in the catalog last time, while they all still exist."""
        if step.forced:
            return None
        hit = self.cache(step.project).lookup(step.key)
        if hit is None or not all(
            self._exists(step.project, out.get("ref")) for out in hit["outputs"].values()
        ):
            return None
        step.log("cached: the catalog entries made last time still exist")
        return hit["outputs"]

    def with_paths(self, project: str, outputs: dict) -> dict:
        """Return catalog entries' outputs with where their files are."""
        done = {}
        for port, out in outputs.items():
            kind, _, rest = out["ref"].partition(":")
            row = (
                self.platform.catalog.get_dataset(project, rest)
                if kind == "dataset"
                else self.platform.catalog.get_model(project, rest)
            )
            folder = self.platform.catalog.path(row)
            extra = (
                {"folder": str(folder), "part": "root", "path": row.path}
                if kind == "dataset"
                else {"path": row.path}
            )
            done[port] = {**out, **extra}
        return done
