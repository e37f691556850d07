"""The platform's rules over HTTP: a project's quota and the notebook profiles, read and replaced."""

from __future__ import annotations

from .conftest import zip_bytes
from .test_jobs_api import environment


async def test_a_quota_set_over_rest_refuses_the_next_job_that_asks_more(api):
    assert await api.get("quota") == (
        200,
        {"project": "default", "quota": dict.fromkeys(("cpu", "memory", "gpu", "npu", "notebooks"))},
    )
    code, body = await api.upload(
        "algorithms", zip_bytes({"environment.yml": environment("python -c pass", cpu=1)}), name="one"
    )
    assert code == 201, body
    code, body = await api.call("PUT", "quota", {"cpu": 0.5})
    assert code == 200 and body["quota"]["cpu"] == 0.5, body
    code, body = await api.post("jobs", {"algorithm": "one"})
    assert code == 400, body
    assert body["field"] == "resources.cpu" and "project default allows 0.5" in body["message"]
    # another project is not limited by it
    assert (await api.get("quota", project="other"))[1]["quota"]["cpu"] is None


async def test_a_quota_with_an_unknown_limit_is_refused_naming_it(api):
    code, body = await api.call("PUT", "quota", {"cpu": 1, "disk": 5})
    assert code == 400 and "disk" in body["message"], body
    code, body = await api.call("PUT", "quota", {"cpu": -1})
    assert code == 400 and body["field"] == "cpu", body
    assert (await api.get("quota"))[1]["quota"]["cpu"] is None  # nothing half-written


async def test_profiles_are_replaced_whole_and_a_mistake_names_its_entry_and_field(api):
    assert await api.get("profiles") == (200, {"profiles": []})
    entries = [
        {"slug": "small", "cpu": 0.5, "memory": 512, "default": True},
        {"slug": "gpu", "display_name": "One GPU", "cpu_max": 2, "accelerator": "gpu", "accelerators_max": 1},
    ]
    code, body = await api.call("PUT", "profiles", {"profiles": entries})
    assert code == 200, body
    small, gpu = body["profiles"]
    assert (small["slug"], small["cpu_max"], small["memory_max"], small["default"]) == (
        "small",
        0.5,
        512,
        True,
    )
    assert (gpu["display_name"], gpu["accelerators_max"], gpu["accelerators"]) == ("One GPU", 1, 0)
    assert (await api.get("profiles"))[1] == body

    bad = [entries[0], {"slug": "big", "cpu": 8, "cpu_max": 4}]
    code, answer = await api.call("PUT", "profiles", {"profiles": bad})
    assert code == 400 and answer["field"] == "profiles[1].cpu", answer
    assert "default 8 is over the maximum 4" in answer["message"]
    code, answer = await api.call("PUT", "profiles", {"profiles": [{"slug": "x", "colour": "red"}]})
    assert code == 400 and "colour" in answer["message"], answer
    assert (await api.get("profiles"))[1] == body  # the refused edits changed nothing
