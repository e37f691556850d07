"""POST /jobs/{id}/events: the token is checked before the body, and answers give no job-id oracle."""

import hashlib
import json

from sqlalchemy import select

from kpl_lab.catalog.jobs import Job

from .test_jobs_api import WAIT, algorithm_zip


def give_token(app, job_id: str, token: bytes) -> None:
    """Store a job's events token as the executors that push events do (its SHA-256 in the handle)."""
    # immediate, as the platform's own writes: a read then a write in SQLite's WAL fails at once
    # ("database is locked") when the job's callbacks wrote in between
    with app.platform.session(immediate=True) as session:
        row = session.scalar(select(Job).where(Job.id == job_id))
        row.handle = {**(row.handle or {}), "token_sha256": hashlib.sha256(token).hexdigest()}


async def test_events_token_is_checked_first_and_refusals_look_the_same(api, tmp_path, jp_serverapp):
    release = tmp_path / "release"
    waiter = algorithm_zip("waiter", WAIT.replace("RELEASE_FILE", str(release)), cpu=0.5)
    for project in ("default", "other"):
        code, body = await api.upload("algorithms", waiter, filename="waiter.zip", project=project)
        assert code == 201, body
    _, mine = await api.post("jobs", {"algorithm": "waiter"})
    _, theirs = await api.post("jobs", {"algorithm": "waiter"}, project="other")
    app = next(e for e in jp_serverapp.extension_manager.extension_apps["kpl_lab"])
    give_token(app, mine["id"], b"my-token")
    give_token(app, theirs["id"], b"their-token")

    events = json.dumps([{"type": "progress", "value": 0.5}]).encode()
    refusals = [
        (f"jobs/{mine['id']}/events", events, {}),
        (f"jobs/{mine['id']}/events", events, {"Authorization": "Bearer my-token"}),
        (f"jobs/{mine['id']}/events", events, {"Authorization": "token wrong"}),
        (f"jobs/{mine['id']}/events", events, {"Authorization": "token their-token"}),
        (f"jobs/{theirs['id']}/events", events, {"Authorization": "token my-token"}),
        ("jobs/0123456789abcdef/events", events, {"Authorization": "token my-token"}),
        ("jobs/no-such-job/events", events, {"Authorization": "token my-token"}),
        (f"jobs/{'x' * 500}/events", events, {"Authorization": "token my-token"}),
        # a bad body with a bad token: the token is refused, the body never parsed
        (f"jobs/{mine['id']}/events", b"{not json", {"Authorization": "token wrong"}),
        ("jobs/no-such-job/events", b"{not json", {"Authorization": "token wrong"}),
    ]
    answers = set()
    for path, body, headers in refusals:
        response = await api.raw("POST", path, body, headers=headers)
        answers.add((response.code, response.body))
    assert len(answers) == 1, answers
    ((code, body),) = answers
    assert code == 403 and json.loads(body)["error"] == "Forbidden"

    mine_path = f"jobs/{mine['id']}/events"
    response = await api.raw("POST", mine_path, b"{not json", headers={"Authorization": "token my-token"})
    assert response.code == 400 and json.loads(response.body)["field"] == "body"
    response = await api.raw("POST", mine_path, events, headers={"Authorization": "token my-token"})
    assert response.code == 200 and json.loads(response.body) == {"accepted": 1}

    release.touch()
    assert (await api.wait_job(mine["id"]))["state"] == "succeeded"
    assert (await api.wait_job(theirs["id"], project="other"))["state"] == "succeeded"
