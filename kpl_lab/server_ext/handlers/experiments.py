"""Experiments: compare jobs; create, list, show, stop and resume searches; plot their studies."""

from __future__ import annotations

from tornado import web

from ...api.experiments import ExperimentList, ExperimentRequest, PlotKind, ResumeExperimentRequest
from ...errors import BadRequest
from ...experiments.compare import compare_jobs
from ..base import KPLHandler


class ComparisonHandler(KPLHandler):
    """GET: two or more jobs side by side (`?ids=A,B,...`)."""

    @web.authenticated
    async def get(self) -> None:
        """Compare jobs."""
        ids = [part for part in self.get_query_argument("ids", "").split(",") if part]
        self.reply(await self.blocking(compare_jobs, self.platform, self.project, ids))


class ExperimentsHandler(KPLHandler):
    """GET: the project's experiments; POST: check and create one, which starts its first trials."""

    @web.authenticated
    async def get(self) -> None:
        """List experiments."""
        service = self.platform.experiments

        def work() -> ExperimentList:
            return ExperimentList(experiments=[service.model(row) for row in service.list(self.project)])

        self.reply(await self.blocking(work))

    @web.authenticated
    async def post(self) -> None:
        """Create an experiment."""
        request = self.body_as(ExperimentRequest)
        service = self.platform.experiments
        user = self.current_user.username

        def work():
            return service.model(service.create(self.project, request, user=user))

        self.reply(await self.blocking(work), status=201)


class ExperimentHandler(KPLHandler):
    """GET: one experiment with its trials and best trial."""

    @web.authenticated
    async def get(self, name: str) -> None:
        """Show an experiment."""
        service = self.platform.experiments
        self.reply(await self.blocking(lambda: service.model(service.get(self.project, name))))


class ExperimentStopHandler(KPLHandler):
    """POST: stop an experiment and its running trials."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Stop an experiment."""
        service = self.platform.experiments
        self.reply(await self.blocking(lambda: service.model(service.stop(self.project, name))))


class ExperimentResumeHandler(KPLHandler):
    """POST: resume a stopped experiment, or a finished one with a larger budget."""

    @web.authenticated
    async def post(self, name: str) -> None:
        """Resume an experiment."""
        body = self.body_as(ResumeExperimentRequest)
        service = self.platform.experiments

        def work():
            return service.model(service.resume(self.project, name, trials=body.trials, seconds=body.seconds))

        self.reply(await self.blocking(work))


class ExperimentPlotHandler(KPLHandler):
    """GET: an Optuna visualisation of the experiment's study as a Plotly figure."""

    @web.authenticated
    async def get(self, name: str, kind: str) -> None:
        """Plot an experiment."""
        try:
            plot = PlotKind(kind)
        except ValueError:
            known = ", ".join(k.value for k in PlotKind)
            raise BadRequest(f"kind: {kind!r} is not one of {known}", field="kind") from None
        self.reply(await self.blocking(self.platform.experiments.plot, self.project, name, plot))
