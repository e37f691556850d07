"""A project's quota under a real hub, on SQLite and PostgreSQL: notebooks, jobs, trials and `kpl-lab` interleaved.

Whatever starts them (a spawn, a job submitted through the service, an experiment's trials,
`kpl-lab` run on the hub's home, a round after a job's end), the project never holds more
than its quota at any moment the test sees; a quota lowered on the admin page, or raised
through the REST API, is what the next round decides with.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

from kpl_lab.client import Client
from kpl_lab.platform import database_url

from .conftest import Hub, wait_for, write_gated

PROJECT = "quota"


@dataclass(frozen=True)
class Moment:
    """What the project held at one moment: (owner kind, owner id) -> CPUs."""

    holders: dict[tuple[str, str], float]

    @property
    def cpu(self) -> float:
        return sum(self.holders.values())

    @property
    def notebooks(self) -> int:
        return sum(kind == "notebook" for kind, _ in self.holders)

    def jobs(self) -> set[str]:
        return {owner for kind, owner in self.holders if kind == "job"}


class Watch:
    """Read what a project holds in the platform's ledger over and over, on a thread; keep every change seen."""

    def __init__(self, hub: Hub, project: str) -> None:
        url = hub.database_url or f"sqlite:///{hub.home / 'kpl.sqlite'}"
        self.engine = create_engine(database_url(url))
        self.project = project
        self.moments: list[Moment] = []
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-watch", daemon=True)
        self._thread.start()

    def now(self) -> Moment:
        """Return what the project holds now."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                text("SELECT owner_kind, owner_id, cpu FROM reservations WHERE project = :project"),
                {"project": self.project},
            ).all()
        return Moment({(kind, owner): cpu for kind, owner, cpu in rows})

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                moment = self.now()
                if not self.moments or moment != self.moments[-1]:
                    self.moments.append(moment)
                self._stop.wait(0.02)
        except BaseException as error:  # the test fails on it, after it stops watching
            self.failure = error

    def stop(self) -> list[Moment]:
        """Stop watching; return every moment seen."""
        self._stop.set()
        self._thread.join()
        self.engine.dispose()
        if self.failure is not None:
            raise self.failure
        return self.moments


def job_states(client: Client) -> dict[str, str]:
    """Return job id -> state of the project's jobs, as its members see them through the service."""
    return {job["id"]: job["state"] for job in client.jobs()}


def test_the_quota_holds_with_notebooks_jobs_trials_and_commands_interleaved(
    hub_on_each_database: Hub, tmp_path: Path
):
    hub = hub_on_each_database
    hub.add_project(PROJECT, ["quinn", "quentin"], {"cpu": 3, "notebooks": 2})
    gates = tmp_path / "gates"
    gates.mkdir()
    added = hub.cli("--project", PROJECT, "algorithm", "add", str(write_gated(tmp_path / "gated")))
    assert added.returncode == 0, added.stderr
    quinn = Client(hub.url, hub.user_token("quinn"), project=PROJECT)
    watch = Watch(hub, PROJECT)

    def submit(gate: str) -> str:
        return quinn.submit("gated", parameters={"gate": str(gates / gate)})["id"]

    def cli_submit(gate: str) -> str:
        done = hub.cli("--project", PROJECT, "job", "submit", "gated", "--param", f"gate={gates / gate}")
        assert done.returncode == 0, done.stderr
        assert done.stdout.endswith(": queued\n"), done.stdout  # beside the hub a command never starts one
        return done.stdout.split()[2]

    def open_gate(gate: str) -> None:
        (gates / gate).touch()

    try:
        # a notebook (1 CPU of the small profile), two jobs through the service: the quota of 3 is full
        assert hub.spawn("quinn", project=PROJECT).status_code in (201, 202)
        hub.wait_ready("quinn")
        first, second, third = submit("first"), submit("second"), submit("third")
        assert [job_states(quinn)[job] for job in (first, second, third)] == ["running", "running", "queued"]
        # an experiment's two trials through the service, a command's job on the hub's home: all wait
        experiment = quinn.create_experiment(
            {
                "name": "search",
                "algorithm": "gated",
                "parameters": {"gate": str(gates / "trials")},
                "space": {"steps": {"type": "int", "low": 2, "high": 5}},
                "objective": {"metric": "training/loss", "direction": "minimize"},
                "budget": {"trials": 2},
                "parallelism": 2,
                "sampler": {"name": "random", "seed": 1},
            }
        )
        trials = [trial["job_id"] for trial in experiment["trials"]]
        assert len(trials) == 2
        listed = hub.cli("--project", PROJECT, "job", "list", "--json")  # wakes the service's rounds
        assert listed.returncode == 0, listed.stderr
        assert {job["id"]: job["state"] for job in json.loads(listed.stdout)}[third] == "queued"
        fourth = cli_submit("fourth")
        refused = hub.spawn("quentin", project=PROJECT)
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"] == f"asks 1 CPU; project {PROJECT} allows 3, 3 in use"
        hub.next_whole_round()
        states = job_states(quinn)
        assert {job for job, state in states.items() if state == "running"} == {first, second}
        assert {job for job, state in states.items() if state == "queued"} == {third, fourth, *trials}
        assert watch.now().jobs() == {first, second}

        # the first ends: its round starts the next in line, and only it
        open_gate("first")
        wait_for(lambda: job_states(quinn)[third] == "running", "the third job's start")
        assert job_states(quinn)[first] == "succeeded"
        hub.next_whole_round()
        assert watch.now().jobs() == {second, third}

        # the administrator lowers the quota on the admin page while the project holds 3 CPUs
        lowered = hub.service(
            "PUT", f"admin/api/projects/{PROJECT}/quota", hub.admin_token, json={"cpu": 2, "notebooks": 2}
        )
        assert lowered.status_code == 200, lowered.text
        held_when_lowered = set(watch.now().holders)
        lowered_at = len(watch.moments)
        assert hub.cli("--project", PROJECT, "job", "list").returncode == 0
        refused = hub.spawn("quentin", project=PROJECT)
        assert refused.status_code == 403, refused.text
        assert refused.json()["message"] == f"asks 1 CPU; project {PROJECT} allows 2, 3 in use"
        # the second ends: notebook and third hold 2 of 2, nothing more starts (the old quota would start one)
        open_gate("second")
        wait_for(lambda: job_states(quinn)[second] == "succeeded", "the second job's end")
        hub.next_whole_round()
        assert watch.now().jobs() == {third}
        # the third ends: one job more fits the new quota, the first trial in line (the old quota: two)
        open_gate("third")
        wait_for(lambda: job_states(quinn)[third] == "succeeded", "the third job's end")
        wait_for(lambda: len(watch.now().jobs()) == 1, "a queued job's start")
        hub.next_whole_round()
        (started,) = watch.now().jobs()
        assert started == trials[0] and watch.now().cpu == 2
        fifth = cli_submit("fifth")

        # raised through the REST API: the next round starts what now fits, in order, and stops there
        raised_at = len(watch.moments)
        raised = hub.service(
            "PUT", f"api/quota?project={PROJECT}", hub.admin_token, json={"cpu": 4, "notebooks": 2}
        )
        assert raised.status_code == 200, raised.text
        wait_for(lambda: len(watch.now().jobs()) == 3, "two more starts")
        hub.next_whole_round()
        assert watch.now().jobs() == {trials[0], trials[1], fourth} and watch.now().cpu == 4
        assert job_states(quinn)[fifth] == "queued"
        member = hub.service("PUT", f"api/quota?project={PROJECT}", hub.user_token("quinn"), json={"cpu": 9})
        assert member.status_code == 403, member.text

        # everything ends: the experiment succeeds with the trials the quota let through
        for gate in ("trials", "fourth", "fifth"):
            open_gate(gate)
        wait_for(
            lambda: quinn.experiment("search")["state"] != "running" and quinn.experiment("search"),
            "the experiment's end",
        )
        wait_for(lambda: set(job_states(quinn).values()) == {"succeeded"}, "every job's end")
        assert quinn.experiment("search")["state"] == "succeeded"
        hub.stop_server("quinn")
    finally:
        for gate in ("first", "second", "third", "trials", "fourth", "fifth"):  # nothing left waiting
            open_gate(gate)
        moments = watch.stop()

    assert len(moments) > 5  # the watch saw the project's holdings change
    for moment in moments[:lowered_at]:
        assert moment.cpu <= 3 and moment.notebooks <= 2, moment
    for moment in moments[lowered_at:raised_at]:  # anything started since the lowering started within 2 CPUs
        assert set(moment.holders) <= held_when_lowered or moment.cpu <= 2, moment
    for moment in moments[raised_at:]:
        assert moment.cpu <= 4 and moment.notebooks <= 2, moment
