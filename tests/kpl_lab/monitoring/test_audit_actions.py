"""Every audited action, of the API's routes and of the admin page, is one the admin guide lists."""

from __future__ import annotations

from pathlib import Path

from kpl_lab.hub.admin import ADMIN_API
from kpl_lab.monitoring.audit import LOGIN, REFUSED_ACTION
from kpl_lab.server_ext.routes import ROUTES

GUIDE = Path(__file__).parents[3] / "docs" / "admin-guide.md"


def test_each_audited_action_is_documented():
    actions = {
        operation.audit for route in ROUTES for operation in route.operations.values() if operation.audit
    }
    actions |= {action for _, handler in ADMIN_API for action in getattr(handler, "audited", {}).values()}
    assert {
        "model.upload",
        "deployment.create",
        "deployment.key.create",
        "quota.set",
        "project.member.add",
    } <= actions
    text = GUIDE.read_text()
    section = text[text.index("### Audit log") : text.index("### Logs")]
    assert {action for action in actions | {LOGIN, REFUSED_ACTION} if f"`{action}`" not in section} == set()
