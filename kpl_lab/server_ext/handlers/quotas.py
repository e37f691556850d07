"""Quotas: a project's limits, read by every reservation; administrators change them."""

from __future__ import annotations

from tornado import web

from ...api.quotas import Quota, QuotaLimits, QuotaRequest
from ...catalog.rules import QUOTA
from ..base import KPLHandler


class QuotaHandler(KPLHandler):
    """GET: the project's quota; PUT (administrators): replace it, in effect at the next reservation."""

    @web.authenticated
    async def get(self) -> None:
        """Answer the project's quota."""
        found = await self.blocking(self.platform.jobs.ledger.rules.read, QUOTA, self.project, {})
        self.reply(Quota(project=self.project, quota=QuotaLimits(**found)))

    @web.authenticated
    async def put(self) -> None:
        """Replace the project's quota (a missing limit: not limited)."""
        self.check_admin("change a project's quota")
        quota = self.body_as(QuotaRequest).model_dump(exclude_none=True)
        await self.blocking(self.platform.jobs.ledger.rules.set, QUOTA, self.project, quota)
        self.reply(Quota(project=self.project, quota=QuotaLimits(**quota)))
