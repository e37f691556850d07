"""Hyperparameter search: Optuna chooses parameters, each trial is an ordinary job of the project.

The driver is a round, not a thread: `ExperimentService.tick()` (the server's background
round, or `kpl-lab experiment create --follow`) reports the objective points each running
trial pushed to Optuna, prunes the trials its pruner condemns (the job is stopped, the trial
marked `pruned`), tells Optuna the value of each trial whose job ended, and submits new
trials up to the experiment's parallelism and budget. Every step reads and writes the
database only, so an experiment survives a restart: the next process to run a round
carries on. A lease on the experiment row keeps two processes from driving it at once.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from sqlalchemy import column, func, or_, select, table, update
from traitlets import Float
from traitlets.config import LoggingConfigurable

from ..api.experiments import MAX_VALUES, ExperimentRequest, Plot, PlotKind, Trial
from ..api.experiments import Experiment as ExperimentModel
from ..api.jobs import JobRequest
from ..catalog.experiments import Experiment, ExperimentTrial
from ..catalog.jobs import Job, Metric
from ..catalog.serialize import utc
from ..catalog.storage import check_name
from ..errors import BadRequest, Conflict, KPLError, NotFound, invalid, parameter_error
from .compare import flatten

if TYPE_CHECKING:
    import optuna

    from ..platform import Platform

ACTIVE = "running"
# Optuna's own tables (our migration 0006 makes them): only to count a study's trials
OPTUNA_STUDIES = table("studies", column("study_id"), column("study_name"))
OPTUNA_TRIALS = table("trials", column("trial_id"), column("study_id"))


def now() -> datetime:
    """Return the current time in UTC."""
    return datetime.now(timezone.utc)


def distribution(spec: dict) -> optuna.distributions.BaseDistribution:
    """Return the Optuna distribution of one entry of a search space."""
    from optuna import distributions

    if spec["type"] == "categorical":
        return distributions.CategoricalDistribution(spec["choices"])
    if spec["type"] == "int":
        return distributions.IntDistribution(spec["low"], spec["high"], log=spec["log"], step=spec["step"])
    return distributions.FloatDistribution(spec["low"], spec["high"], log=spec["log"], step=spec.get("step"))


def grid_size(spec: dict) -> int | None:
    """Return how many values a space entry gives the grid sampler, without listing them (None: continuous)."""
    if spec["type"] == "categorical":
        return len(spec["choices"])
    if spec["type"] == "int" and not spec["log"]:
        return len(range(spec["low"], spec["high"] + 1, spec["step"]))
    if spec["type"] == "float" and spec.get("step"):
        return int(round((spec["high"] - spec["low"]) / spec["step"])) + 1
    return None


def grid_values(spec: dict) -> list | None:
    """Return every value of a space entry for the grid sampler (None for a continuous range)."""
    if spec["type"] == "categorical":
        return list(spec["choices"])
    if spec["type"] == "int" and not spec["log"]:
        return list(range(spec["low"], spec["high"] + 1, spec["step"]))
    if spec["type"] == "float" and spec.get("step"):
        return [spec["low"] + index * spec["step"] for index in range(grid_size(spec))]
    return None


def grid_problems(space: dict[str, dict]) -> list[tuple[str, str]]:
    """Return what keeps a space from being a grid of at most MAX_VALUES points, counted, never listed."""
    sizes = {key: grid_size(spec) for key, spec in space.items()}
    problems = [
        (f"space.{key}", "the grid sampler needs choices, an int range or a float step")
        for key, size in sizes.items()
        if size is None
    ]
    problems += [
        (f"space.{key}", f"gives the grid {size:,} values; the grid sampler takes at most {MAX_VALUES:,}")
        for key, size in sizes.items()
        if size is not None and size > MAX_VALUES
    ]
    points = math.prod(size for size in sizes.values() if size)
    if not problems and points > MAX_VALUES:
        shown = " × ".join(f"{size:,} ({key})" for key, size in sizes.items())
        problems.append(
            (
                "space",
                f"the grid has {shown} = {points:,} points; the grid sampler takes at most {MAX_VALUES:,}",
            )
        )
    return problems


def series_of(figures: dict, metric: str) -> tuple[str, str] | None:
    """Return the (figure, series) a metric names among a job's figures, None when it has none."""
    if "/" in metric:
        figure, series = metric.split("/", 1)
        fields = figures.get(figure) or {}
        return (figure, series) if series in (fields.get("y1_name"), fields.get("y2_name")) else None
    for figure, fields in sorted(figures.items()):
        if metric in (fields.get("y1_name"), fields.get("y2_name")):
            return figure, metric
    return None


class ExperimentService(LoggingConfigurable):
    """Create, drive, stop and resume the hyperparameter searches of every project."""

    lease_seconds = Float(
        30.0, help="Seconds a process holds an experiment after its last round before another may drive it."
    ).tag(config=True)

    def __init__(self, platform: Platform, **kwargs) -> None:
        super().__init__(parent=platform, **kwargs)
        self.platform = platform
        self.driver_id = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._lock = threading.RLock()  # one round, create, stop or resume at a time in this process
        self._storage = None

    # Optuna

    @property
    def storage(self) -> optuna.storages.RDBStorage:
        """Return Optuna's storage on the platform's database (its tables come from our migrations)."""
        if self._storage is None:
            import optuna

            from ..platform import database_url

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self.platform.engine  # noqa: B018 - migrates first: Optuna must find its tables made
            url = database_url(self.platform.database_url)
            kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
            # our Alembic owns the schema: Optuna's would stamp `alembic_version` (docs/experiments.md)
            self._storage = optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs, skip_compatibility_check=True, skip_table_creation=True
            )
        return self._storage

    def close(self) -> None:
        """Close Optuna's connections to the database."""
        if self._storage is not None:
            self._storage.scoped_session.remove()
            self._storage.engine.dispose()
            self._storage = None

    def _sampler(self, experiment: Experiment, asked: int) -> optuna.samplers.BaseSampler:
        """Return the sampler for a round after `asked` trials.

        A round makes a new sampler: with the seed alone each would draw the first trial's
        parameters again, so its seed moves on by the trials asked so far (still reproducible).
        """
        import optuna

        name, seed = experiment.sampler["name"], experiment.sampler.get("seed")
        if seed is not None and name != "grid":  # the grid sampler skips the points already tried
            seed = (seed + asked) % 2**32  # numpy's seeds are 32-bit
        if name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "grid":
            grid = {key: grid_values(spec) for key, spec in experiment.space.items()}
            return optuna.samplers.GridSampler(grid, seed=seed)
        if name == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        return optuna.samplers.TPESampler(seed=seed)

    def _pruner(self, experiment: Experiment) -> optuna.pruners.BasePruner:
        import optuna

        spec = experiment.pruner
        if not spec:
            return optuna.pruners.NopPruner()
        if spec["name"] == "successive_halving":
            return optuna.pruners.SuccessiveHalvingPruner(
                min_resource=spec["min_resource"], reduction_factor=spec["reduction_factor"]
            )
        if spec["name"] == "hyperband":
            return optuna.pruners.HyperbandPruner(
                min_resource=spec["min_resource"],
                max_resource=spec["max_resource"] or "auto",
                reduction_factor=spec["reduction_factor"],
            )
        return optuna.pruners.MedianPruner(
            n_startup_trials=spec["startup_trials"], n_warmup_steps=spec["warmup_steps"]
        )

    def study(self, experiment: Experiment) -> optuna.Study:
        """Return the experiment's Optuna study with its sampler and pruner."""
        import optuna

        with self.platform.session() as session:  # counted, not read: Optuna would load every trial
            asked = session.scalar(
                select(func.count())
                .select_from(
                    OPTUNA_TRIALS.join(OPTUNA_STUDIES, OPTUNA_TRIALS.c.study_id == OPTUNA_STUDIES.c.study_id)
                )
                .where(OPTUNA_STUDIES.c.study_name == experiment.study_name)
            )
        return optuna.load_study(
            study_name=experiment.study_name,
            storage=self.storage,
            sampler=self._sampler(experiment, asked),
            pruner=self._pruner(experiment),
        )

    # creating and reading

    def check(self, project: str, request: ExperimentRequest) -> tuple[Any, dict[str, str], list[str]]:
        """Check the space and objective before any trial: return (version, pinned inputs, warnings).

        Unknown parameters, values parameter.yml refuses and unknown inputs answer 400 naming
        each field; a metric no earlier run of the function pushed is a warning.
        """
        from ..algorithms.errors import AlgorithmError, ParameterError
        from ..algorithms.parameters import apply_overrides

        catalog = self.platform.catalog
        version = catalog.get_algorithm(project, request.algorithm)
        algorithm = self.platform.jobs.scheduler.read_algorithm(version)
        try:
            function = algorithm.spec.function(request.function)
        except AlgorithmError as error:
            raise BadRequest(str(error), field="function") from error
        problems = []
        known = flatten(version.parameters or {})
        for key, spec in request.space.items():
            if key not in known:
                names = ", ".join(sorted(known)) or "none"
                problems.append(
                    (f"space.{key}", f"{version.ref} has no parameter {key!r} (parameters: {names})")
                )
                continue
            if key in request.parameters:
                problems.append((f"space.{key}", "is also a fixed parameter: give it in one place"))
            samples = spec.choices if spec.type == "categorical" else [spec.low, spec.high]
            for value in samples:
                try:
                    apply_overrides(version.parameters or {}, {key: value})
                except ParameterError as error:
                    problems += [(f"space.{key}", message) for _, message in parameter_error(error).errors]
                    break
        if request.sampler.name.value == "grid":
            problems += grid_problems({key: spec.model_dump() for key, spec in request.space.items()})
        try:
            apply_overrides(version.parameters or {}, request.parameters)
        except ParameterError as error:
            problems += parameter_error(error).errors
        declared = {port.key for port in function.inputs}
        problems += [
            (f"inputs.{key}", f"the {request.function} function of {version.ref} has no such input")
            for key in request.inputs
            if key not in declared
        ]
        if problems:
            raise invalid(problems, "the experiment")
        inputs = {}
        for key, ref in request.inputs.items():
            try:
                kind, row, _ = catalog.resolve_input(project, ref)
            except KPLError as error:
                raise type(error)(f"input {key!r}: {error.message}", field=f"inputs.{key}") from error
            inputs[key] = f"{kind}:{row.ref}"  # pinned: every trial reads the same version
        return version, inputs, self._metric_warnings(project, version, request)

    def _metric_warnings(self, project: str, version, request: ExperimentRequest) -> list[str]:
        name = version.algorithm.name
        with self.platform.session() as session:
            jobs = session.scalars(
                select(Job)
                .join(Job.project)
                .where(Job.algorithm_ref.like(f"{name}:%"), Job.function == request.function)
                .where(Job.project.has(name=project))
            ).all()
        metric = request.objective.metric
        what = f"the {request.function} function of {name}"
        if not jobs:
            return [f"objective {metric!r}: no earlier run of {what} to check it against"]
        if any(series_of(job.figures or {}, metric) for job in jobs):
            return []
        pushed = sorted(
            {
                f"{figure}/{fields[axis]}"
                for job in jobs
                for figure, fields in (job.figures or {}).items()
                for axis in ("y1_name", "y2_name")
                if fields.get(axis)
            }
        )
        return [
            f"objective {metric!r}: never pushed by the {len(jobs)} earlier runs of {what} "
            f"(they pushed: {', '.join(pushed) or 'no metric'})"
        ]

    def create(self, project: str, request: ExperimentRequest, user: str = "") -> Experiment:
        """Check an experiment, record it with its Optuna study, and start its first trials."""
        import optuna

        check_name(project, "project")
        check_name(request.name, "name")
        version, inputs, warnings = self.check(project, request)
        with self._lock:
            with self.platform.session(immediate=True) as session:
                proj = self.platform.catalog.ensure_project(session, project)
                taken = session.scalar(
                    select(Experiment.id).where(
                        Experiment.project_id == proj.id, Experiment.name == request.name
                    )
                )
                if taken is not None:
                    raise Conflict(f"experiment {request.name!r} already exists", field="name")
                experiment = Experiment(
                    project_id=proj.id,
                    name=request.name,
                    user=user,
                    algorithm_ref=version.ref,
                    function=request.function,
                    inputs=inputs,
                    parameters=request.parameters,
                    resources=request.resources.model_dump(exclude_none=True) if request.resources else None,
                    space={key: spec.model_dump(mode="json") for key, spec in request.space.items()},
                    objective=request.objective.model_dump(mode="json"),
                    budget=request.budget.model_dump(mode="json"),
                    parallelism=request.parallelism,
                    sampler=request.sampler.model_dump(mode="json"),
                    pruner=request.pruner.model_dump(mode="json") if request.pruner else None,
                    warnings=warnings,
                    study_name=f"kpl/{project}/{request.name}/{secrets.token_hex(4)}",
                )
                session.add(experiment)
                session.flush()
                experiment_id = experiment.id
            optuna.create_study(
                storage=self.storage,
                study_name=experiment.study_name,
                direction=request.objective.direction.value,
            )
            self.drive(experiment_id)
        return self.get(project, request.name)

    def get(self, project: str, name: str) -> Experiment:
        """Return one experiment of a project with its trials."""
        with self.platform.session() as session:
            experiment = session.scalar(
                select(Experiment).where(Experiment.name == name, Experiment.project.has(name=project))
            )
            if experiment is None:
                raise NotFound(f"experiment {name!r} not found in project {project!r}")
            experiment.project  # noqa: B018 - loaded while the session is open
            return experiment

    def list(self, project: str) -> list[Experiment]:
        """Return a project's experiments, newest first."""
        with self.platform.session() as session:
            rows = session.scalars(
                select(Experiment)
                .where(Experiment.project.has(name=project))
                .order_by(Experiment.created.desc(), Experiment.id.desc())
            ).all()
            for row in rows:
                row.project  # noqa: B018
            return list(rows)

    def best(self, experiment: Experiment) -> ExperimentTrial | None:
        """Return the complete trial with the best objective value (None before one completes)."""
        done = [trial for trial in experiment.trials if trial.state == "complete" and trial.value is not None]
        if not done:
            return None
        pick = max if experiment.objective["direction"] == "maximize" else min
        return pick(done, key=lambda trial: trial.value)

    def model(self, experiment: Experiment) -> ExperimentModel:
        """Return an experiment as the REST API answers it."""
        best = self.best(experiment)
        best_job = self.platform.jobs.records.job(best.job_id) if best else None
        registered = [
            output["registered"]
            for output in (best_job.outputs if best_job else {}).values()
            if (output.get("registered") or "").startswith("model:")
        ]
        return ExperimentModel(
            name=experiment.name,
            project=experiment.project.name,
            algorithm=experiment.algorithm_ref,
            function=experiment.function,
            inputs=experiment.inputs,
            parameters=experiment.parameters,
            space=experiment.space,
            objective=experiment.objective,
            budget=experiment.budget,
            parallelism=experiment.parallelism,
            sampler=experiment.sampler,
            pruner=experiment.pruner,
            state=experiment.state,
            reason=experiment.reason,
            warnings=experiment.warnings,
            trials=[
                Trial(
                    number=trial.number,
                    state=trial.state,
                    job_id=trial.job_id,
                    params=trial.params,
                    value=trial.value,
                    reported=trial.reported,
                    created=utc(trial.created),
                    finished=utc(trial.finished),
                )
                for trial in experiment.trials
            ],
            best_trial=best.number if best else None,
            best_value=best.value if best else None,
            best_params=best.params if best else None,
            best_job=best.job_id if best else None,
            best_model=registered[0] if registered else None,
            created=utc(experiment.created),
            finished=utc(experiment.finished),
            searched_seconds=self._elapsed(experiment)
            if experiment.state == "running"
            else experiment.seconds_before,
        )

    # driving

    def tick(self) -> list[str]:
        """Run one round of every running experiment this process may drive; return their names."""
        with self.platform.session() as session:
            running = session.execute(
                select(Experiment.id, Experiment.name).where(Experiment.state == ACTIVE)
            ).all()
        driven = []
        for experiment_id, name in running:
            try:
                if self.drive(experiment_id):
                    driven.append(name)
            except Exception:
                self.log.exception("experiment %s: round failed", name)
        return driven

    def _claim(self, experiment_id: int) -> bool:
        """Take or renew the lease on an experiment; False while another process holds it."""
        moment = time.time()
        with self.platform.session(immediate=True) as session:
            claimed = session.execute(
                update(Experiment)
                .where(
                    Experiment.id == experiment_id,
                    or_(Experiment.driver == self.driver_id, Experiment.lease_until < moment),
                )
                .values(driver=self.driver_id, lease_until=moment + self.lease_seconds)
            )
            return claimed.rowcount == 1

    def release(self) -> None:
        """Give up the leases this process holds (a clean shutdown), so another may drive at once."""
        with self.platform.session(immediate=True) as session:
            session.execute(
                update(Experiment)
                .where(Experiment.driver == self.driver_id)
                .values(driver="", lease_until=0.0)
            )

    def drive(self, experiment_id: int) -> bool:
        """Run one round of one experiment: report, prune, finish trials, start new ones."""
        with self._lock:
            if not self._claim(experiment_id):
                return False
            with self.platform.session() as session:
                experiment = session.get(Experiment, experiment_id)
                experiment.project  # noqa: B018
            if experiment.state != ACTIVE:
                return False
            # made once a step needs it (a pruner's question, a new trial): most rounds need none
            study = functools.cache(functools.partial(self.study, experiment))
            for trial in experiment.trials:
                if trial.state == ACTIVE:
                    self._follow(experiment, study, trial)
            self._start_or_finish(experiment_id, study)
            return True

    def _points(self, job: Job, metric: str, after: int) -> list[tuple[int, float]]:
        """Return (ordinal, value) of the objective's points a job pushed after the first `after`."""
        found = series_of(job.figures or {}, metric)
        if found is None:
            return []
        with self.platform.session() as session:
            rows = session.execute(
                select(Metric.step, Metric.value)
                .where(Metric.job_id == job.id, Metric.figure == found[0], Metric.series == found[1])
                .where(Metric.step >= after)
                .order_by(Metric.step)
            ).all()
        return [(int(step), float(value)) for step, value in rows]

    def _follow(
        self, experiment: Experiment, study: Callable[[], optuna.Study], trial: ExperimentTrial
    ) -> None:
        """Report a running trial's new points, prune it if the pruner says so, finish it if its job ended."""
        import optuna

        job = self.platform.jobs.records.job(trial.job_id)
        points = self._points(job, experiment.objective["metric"], trial.reported)
        # pruned like Optuna's own tell: the value is the last point reported
        for step, value in points:
            self.storage.set_trial_intermediate_value(trial.trial_id, step, value)
        reported = trial.reported + len(points)
        last = points[-1][1] if points else None
        if not job.is_final:
            condemned = (
                experiment.pruner and points and optuna.trial.Trial(study(), trial.trial_id).should_prune()
            )
            if condemned:
                with contextlib.suppress(Conflict):  # it ended meanwhile
                    self.platform.jobs.stop(
                        job.project.name,
                        job.id,
                        f"pruned by experiment {experiment.name} after {reported} points",
                    )
                self._tell(trial.trial_id, optuna.trial.TrialState.PRUNED, last)
                self._set_trial(trial.id, state="pruned", value=last, reported=reported, finished=now())
            elif points:
                self._set_trial(trial.id, reported=reported)
            return
        if job.state == "succeeded":
            final = self._points(job, experiment.objective["metric"], max(reported - 1, 0))
            value = final[-1][1] if final else last
            if value is not None:
                self._tell(trial.trial_id, optuna.trial.TrialState.COMPLETE, value)
                self._set_trial(trial.id, state="complete", value=value, reported=reported, finished=now())
                return
        self._tell(trial.trial_id, optuna.trial.TrialState.FAIL)
        state = "stopped" if job.state == "stopped" else "failed"
        self._set_trial(trial.id, state=state, reported=reported, finished=now())

    def _tell(self, trial_id: int, state: optuna.trial.TrialState, value: float | None = None) -> None:
        """Record a trial's end in Optuna once (a round cut short may tell it again: Optuna refuses that).

        Straight to the storage, not `Study.tell`: the grid sampler's hook there calls
        `Study.stop`, which only works inside `Study.optimize`; our samplers need no other hook.
        """
        from optuna.exceptions import UpdateFinishedTrialError

        with contextlib.suppress(UpdateFinishedTrialError):
            self.storage.set_trial_state_values(trial_id, state, None if value is None else [value])

    def _set_trial(self, trial_row_id: int, **values: Any) -> None:
        with self.platform.session(immediate=True) as session:
            session.execute(
                update(ExperimentTrial).where(ExperimentTrial.id == trial_row_id).values(**values)
            )

    def _elapsed(self, experiment: Experiment) -> float:
        return experiment.seconds_before + (now() - utc(experiment.resumed)).total_seconds()

    def _start_or_finish(self, experiment_id: int, study: Callable[[], optuna.Study]) -> None:
        """Submit trials up to the parallelism and budget; finish the experiment once all are done."""
        with self.platform.session() as session:
            experiment = session.get(Experiment, experiment_id)
            experiment.project  # noqa: B018
        counted = [trial for trial in experiment.trials if trial.state != "stopped"]
        active = [trial for trial in experiment.trials if trial.state == ACTIVE]
        budget = experiment.budget["trials"]
        if experiment.sampler["name"] == "grid":
            budget = min(budget, math.prod(grid_size(spec) for spec in experiment.space.values()))
        seconds = experiment.budget.get("seconds")
        out_of_time = seconds is not None and self._elapsed(experiment) >= seconds
        room = 0 if out_of_time else min(experiment.parallelism - len(active), budget - len(counted))
        for _ in range(max(room, 0)):
            if not self._start_trial(experiment, study()):
                return
        if room <= 0 and not active:
            best = self.best(experiment)
            state, reason = ("succeeded", "") if best else ("failed", "no trial completed")
            if out_of_time:
                reason = f"time budget of {seconds:g} s spent" + (f"; {reason}" if reason else "")
            self._finish(experiment, state, reason)

    def _finish(self, experiment: Experiment, state: str, reason: str) -> None:
        with self.platform.session(immediate=True) as session:
            session.execute(
                update(Experiment)
                .where(Experiment.id == experiment.id)
                .values(
                    state=state,
                    reason=reason,
                    finished=now(),
                    seconds_before=self._elapsed(experiment),
                    driver="",
                    lease_until=0.0,
                )
            )

    def _start_trial(self, experiment: Experiment, study: optuna.Study) -> bool:
        """Ask Optuna for parameters and submit them as a job; False (experiment failed) when refused."""
        import optuna

        space = {key: distribution(spec) for key, spec in experiment.space.items()}
        asked = study.ask(space)
        params = dict(asked.params)
        request = JobRequest(
            project=experiment.project.name,
            algorithm=experiment.algorithm_ref,
            function=experiment.function,
            inputs=experiment.inputs,
            parameters={**experiment.parameters, **params},
            resources=experiment.resources,
        )
        try:
            job = self.platform.jobs.submit(request, user=experiment.user)
        except KPLError as error:
            self._tell(asked._trial_id, optuna.trial.TrialState.FAIL)
            self._finish(experiment, "failed", f"trial {asked.number} was refused: {error.message}")
            return False
        with self.platform.session(immediate=True) as session:
            session.execute(
                update(Job).where(Job.id == job.id).values(experiment=experiment.name, trial=asked.number)
            )
            session.add(
                ExperimentTrial(
                    experiment_id=experiment.id,
                    number=asked.number,
                    trial_id=asked._trial_id,
                    job_id=job.id,
                    params=params,
                )
            )
        self.log.info("experiment %s: trial %d is job %s %s", experiment.name, asked.number, job.id, params)
        return True

    # stopping and resuming

    def stop(self, project: str, name: str) -> Experiment:
        """Stop starting trials and stop the running ones; a resume tries their parameters again."""
        import optuna

        with self._lock:
            experiment = self.get(project, name)
            if experiment.state != ACTIVE:
                raise Conflict(f"experiment {name!r} is {experiment.state}, not running")
            with self.platform.session(immediate=True) as session:
                session.execute(
                    update(Experiment)
                    .where(Experiment.id == experiment.id)
                    .values(
                        state="stopped", reason="stopped on request", seconds_before=self._elapsed(experiment)
                    )
                )
            study = self.study(experiment)
            for trial in experiment.trials:
                if trial.state != ACTIVE:
                    continue
                with contextlib.suppress(Conflict):  # it ended meanwhile
                    self.platform.jobs.stop(project, trial.job_id, f"experiment {name} stopped")
                self._tell(trial.trial_id, optuna.trial.TrialState.FAIL)
                study.enqueue_trial(trial.params)  # the next trial after a resume tries them again
                self._set_trial(trial.id, state="stopped", finished=now())
        return self.get(project, name)

    def resume(
        self, project: str, name: str, trials: int | None = None, seconds: float | None = None
    ) -> Experiment:
        """Run a stopped experiment again, or a finished one with a larger budget."""
        with self._lock:
            experiment = self.get(project, name)
            budget = dict(experiment.budget)
            if trials is not None:
                budget["trials"] = trials
            if seconds is not None:
                budget["seconds"] = seconds
            if experiment.state == ACTIVE:
                raise Conflict(f"experiment {name!r} is already running")
            if experiment.state != "stopped" and budget == experiment.budget:
                raise Conflict(
                    f"experiment {name!r} has {experiment.state}: give a larger budget to resume it"
                )
            with self.platform.session(immediate=True) as session:
                session.execute(
                    update(Experiment)
                    .where(Experiment.id == experiment.id)
                    .values(state=ACTIVE, reason="", budget=budget, resumed=now(), finished=None)
                )
            self.drive(experiment.id)
        return self.get(project, name)

    # results

    def plot(self, project: str, name: str, kind: PlotKind) -> Plot:
        """Return Optuna's optimisation history, parameter importance or parallel-coordinate figure."""
        from optuna import visualization

        experiment = self.get(project, name)
        study = self.study(experiment)
        complete = sum(trial.state == "complete" for trial in experiment.trials)
        needed = 2 if kind != PlotKind.history else 1
        if complete < needed:
            raise Conflict(f"the {kind.value} plot needs {needed} complete trials, {name!r} has {complete}")
        draw = {
            PlotKind.history: visualization.plot_optimization_history,
            PlotKind.importance: visualization.plot_param_importances,
            PlotKind.parallel: visualization.plot_parallel_coordinate,
        }[kind]
        figure = json.loads(draw(study).to_json())
        return Plot(data=figure.get("data", []), layout=figure.get("layout", {}))
