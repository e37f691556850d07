"""Notebook profiles are the platform's rules: an administrator's PUT /kpl/api/profiles is the next spawn form and spawn."""

from __future__ import annotations

import html
import re

import requests

from .conftest import PROFILES, Hub

TINY = {
    "slug": "tiny",
    "display_name": "Tiny notebook",
    "cpu": 0.5,
    "cpu_max": 1,
    "memory": 256,
    "memory_max": 512,
    "default": True,
}


def spawn_form(browser: requests.Session, hub: Hub, user: str) -> str:
    """Return the hub's spawn page of `user`, as their browser gets it."""
    answer = browser.get(f"{hub.url}/hub/spawn/{user}", timeout=60)
    assert answer.status_code == 200, answer.text
    assert "kpl-spawn-form" in answer.text, answer.text  # the form, not a login page
    return answer.text


def test_an_administrators_profiles_are_the_next_spawn_form_and_spawn(hub: Hub):
    hub.add_project("shapes", ["pia"], {})
    # before anyone opened a spawn form: the configured profiles were never loaded yet
    answer = hub.service("PUT", "api/profiles", hub.admin_token, json={"profiles": [TINY]})
    assert answer.status_code == 200, answer.text
    assert [profile["slug"] for profile in answer.json()["profiles"]] == ["tiny"]

    browser = hub.browser("pia")
    form = spawn_form(browser, hub, "pia")
    assert 'data-profile="tiny"' in form and "Tiny notebook" in form
    assert 'data-profile="small"' not in form and 'data-profile="gpu"' not in form
    assert 'name="tiny-cpu" value="0.5" min="0.1" max="1"' in form

    refused = hub.spawn("pia", profile="small")
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == "unknown profile 'small': choose one of tiny"
    refused = hub.spawn("pia", profile="tiny", cpu=2)
    assert refused.status_code == 400, refused.text
    assert refused.json()["message"] == "cpu 2 is over the maximum 1 of profile 'tiny'"
    # the form as the browser posts it: multipart, to its action (which carries the page's _xsrf)
    fields = {"project": "shapes", "profile": "tiny", "tiny-cpu": "1", "tiny-memory": "512", "tiny-shm": "64"}
    posted = browser.post(
        hub.url + html.unescape(re.search(r'<form[^>]*id="spawn_form"[^>]*action="([^"]+)"', form, re.S)[1]),
        files={name: (None, value) for name, value in fields.items()},
        allow_redirects=False,
        timeout=60,
    )
    assert posted.status_code == 302, posted.text
    server = hub.wait_ready("pia")
    assert server["user_options"] == {
        "profile": "tiny", "project": "shapes", "cpu": 1.0, "memory": 512, "shm": 64, "accelerators": 0
    }  # fmt: skip
    assert hub.reservations("shapes") == [("notebook", "pia/", {})]
    hub.stop_server("pia")

    # a member may read them, not change them
    pia = hub.user_token("pia")
    assert [p["slug"] for p in hub.service("GET", "api/profiles", pia).json()["profiles"]] == ["tiny"]
    refused = hub.service("PUT", "api/profiles", pia, json={"profiles": [{**TINY, "cpu_max": 64}]})
    assert refused.status_code == 403, refused.text
    assert refused.json()["message"] == "only an administrator may change the notebook profiles"

    # the configured ones again: the form offers them at once
    answer = hub.service("PUT", "api/profiles", hub.admin_token, json={"profiles": PROFILES})
    assert answer.status_code == 200, answer.text
    form = spawn_form(browser, hub, "pia")
    assert 'data-profile="small"' in form and 'data-profile="gpu"' in form and "tiny" not in form
    refused = hub.spawn("pia", profile="tiny")
    assert refused.status_code == 400 and "unknown profile 'tiny'" in refused.json()["message"]
