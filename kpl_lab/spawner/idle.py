"""The optional admin idle policy: a notebook is idle when neither its browser nor its GPUs were busy lately.

Notebooks are never stopped unless an admin runs this culler (as a hub service with the
`admin:servers` and `read:users` scopes). Its activity is the later of the hub's
`last_activity` (browser, kernels) and the last time one of the notebook's GPUs (from
its ledger reservation) was above `busy_percent` utilization, read by the one NVML reader.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from urllib.parse import quote

from sqlalchemy import select

from ..catalog.jobs import Reservation
from ..engine.usage import read_gpus
from .quota import OWNER_KIND

log = logging.getLogger(__name__)

UtilizationReader = Callable[[Iterable[int]], dict[int, float]]


@dataclass(frozen=True)
class Notebook:
    """A running notebook as the culler sees it."""

    user: str
    server: str  # "" for the default server
    last_activity: datetime | None  # from the hub (browser and kernel activity)
    gpus: tuple[int, ...] = ()

    @property
    def owner_id(self) -> str:
        return f"{self.user}/{self.server}"


def gpu_utilization(indexes: Iterable[int]) -> dict[int, float]:
    """Return the utilization_percent of each GPU index NVML can read; none without a driver."""
    gpus, _ = read_gpus(list(indexes))
    return {gpu["index"]: gpu["utilization_percent"] for gpu in gpus}


class IdlePolicy:
    """Decide which notebooks are idle, remembering when each GPU was last busy."""

    def __init__(
        self, timeout_s: float, busy_percent: float = 5.0, reader: UtilizationReader = gpu_utilization
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s: expected seconds > 0, got {timeout_s!r}")
        self.timeout_s = timeout_s
        self.busy_percent = busy_percent
        self.reader = reader
        self.gpu_busy_at: dict[int, datetime] = {}

    def sample(self, notebooks: Iterable[Notebook], now: datetime) -> None:
        """Read the utilization of the notebooks' GPUs and note those busy now."""
        indexes = sorted({index for notebook in notebooks for index in notebook.gpus})
        if not indexes:
            return
        for index, percent in self.reader(indexes).items():
            if percent >= self.busy_percent:
                self.gpu_busy_at[index] = now

    def last_active(self, notebook: Notebook) -> datetime | None:
        """Return the later of the browser's activity and its GPUs' last busy sample."""
        times = [t for t in (notebook.last_activity, *(self.gpu_busy_at.get(i) for i in notebook.gpus)) if t]
        return max(times) if times else None

    def idle(self, notebooks: list[Notebook], now: datetime) -> list[Notebook]:
        """Sample the GPUs, then return the notebooks with no activity for `timeout_s`."""
        self.sample(notebooks, now)
        quiet = []
        for notebook in notebooks:
            active = self.last_active(notebook)
            if active is None or (now - active).total_seconds() >= self.timeout_s:
                quiet.append(notebook)
        return quiet


def notebook_gpus(platform) -> dict[str, tuple[int, ...]]:
    """Return the GPU indexes each notebook holds in the ledger, by owner id (user/server)."""
    with platform.session() as session:
        rows = session.scalars(select(Reservation).where(Reservation.owner_kind == OWNER_KIND))
        return {row.owner_id: tuple((row.devices or {}).get("gpu", ())) for row in rows}


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def notebooks_from_hub(users: list[dict], gpus: dict[str, tuple[int, ...]]) -> list[Notebook]:
    """Return the running notebooks in a hub `GET /users?state=active` answer."""
    notebooks = []
    for user in users:
        for name, server in (user.get("servers") or {}).items():
            if not server.get("ready"):
                continue
            owner = f"{user['name']}/{name}"
            notebooks.append(
                Notebook(user["name"], name, _parse_time(server.get("last_activity")), gpus.get(owner, ()))
            )
    return notebooks


async def cull_once(
    policy: IdlePolicy, api_url: str, token: str, platform, now: datetime | None = None
) -> list[str]:
    """Stop the idle notebooks through the hub API; return their owner ids."""
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    client = AsyncHTTPClient()
    headers = {"Authorization": f"token {token}"}
    response = await client.fetch(HTTPRequest(f"{api_url}/users?state=active", headers=headers))
    users = json.loads(response.body)
    if isinstance(users, dict):  # paginated answer
        users = users.get("items", [])
    notebooks = notebooks_from_hub(users, notebook_gpus(platform))
    stopped = []
    for notebook in policy.idle(notebooks, now or datetime.now(timezone.utc)):
        url = f"{api_url}/users/{quote(notebook.user)}/servers/{quote(notebook.server)}"
        log.info("Stopping idle notebook %s", notebook.owner_id)
        await client.fetch(HTTPRequest(url, method="DELETE", headers=headers))
        stopped.append(notebook.owner_id)
    return stopped


def main(argv: list[str] | None = None) -> None:
    """Run the culler as a hub service: `python -m kpl_lab.spawner.idle --timeout 3600`."""
    from ..platform import Platform

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument(
        "--timeout", type=float, required=True, help="seconds without browser or GPU activity"
    )
    parser.add_argument("--every", type=float, default=300, help="seconds between checks")
    parser.add_argument(
        "--busy-percent", type=float, default=5.0, help="GPU utilization (percent) that counts as activity"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    policy = IdlePolicy(args.timeout, args.busy_percent)
    platform = Platform()
    api_url, token = os.environ["JUPYTERHUB_API_URL"], os.environ["JUPYTERHUB_API_TOKEN"]

    async def loop() -> None:
        while True:
            try:
                await cull_once(policy, api_url, token, platform)
            except Exception:
                log.exception("idle check failed; trying again in %s s", args.every)
            await asyncio.sleep(args.every)

    asyncio.run(loop())


if __name__ == "__main__":
    main()
