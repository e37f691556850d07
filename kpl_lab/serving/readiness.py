"""When a deployment is ready: the one rule the service and the CLI's `--wait` through REST share."""

from __future__ import annotations

from ..errors import Unavailable


def all_ready(name: str, states: list[dict]) -> bool:
    """Return whether every replica state is ready; raise with the first failed replica's reason and log."""
    failed = [s for s in states if s["state"] in ("failed", "stopped")]
    if failed:
        lines = failed[0].get("last_log_lines") or ""
        raise Unavailable(
            f"replica {failed[0]['id']} of deployment {name!r} {failed[0]['state']}: "
            f"{failed[0].get('reason') or ''}" + (f"\n{lines}" if lines else "")
        )
    return bool(states) and all(s["state"] == "ready" for s in states)
