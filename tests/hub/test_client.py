"""The Python client against a real hub: in a notebook it talks to the shared service as its user."""

from __future__ import annotations

import subprocess
import sys

import psutil
import pytest

from kpl_lab.client import Client
from kpl_lab.errors import BadRequest

from .conftest import Hub

# what a kernel of the notebook runs: Client() with nothing but the environment the hub gave it
IN_NOTEBOOK = (
    "from kpl_lab.client import Client; c = Client(); print(c.url, c.project, c.version()['version'])"
)


def test_client_in_a_notebook_talks_to_the_service_as_its_user(hub: Hub):
    hub.add_project("geo", ["gina"], {"cpu": 2, "memory": 4096, "notebooks": 1})
    assert hub.spawn("gina").status_code in (201, 202)
    server = hub.wait_ready("gina")
    env = psutil.Process(server["state"]["pid"]).environ()
    env.pop("KPL_API_URL", None)  # set in the server's own process only, after it started
    shown = subprocess.run(
        [sys.executable, "-c", IN_NOTEBOOK], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout.split()
    assert shown[0] == env["KPL_SERVICE_URL"] + "api/"
    assert shown[1] == "geo"
    # the service saw gina: she may not read another project
    token = env["JUPYTERHUB_API_TOKEN"]
    hub.add_project("other", ["olga"], {})
    assert Client(env["KPL_SERVICE_URL"] + "api/", token, project="geo").datasets() == []
    with pytest.raises(Exception, match="project 'other' not found"):
        Client(env["KPL_SERVICE_URL"] + "api/", token, project="other").datasets()
    hub.stop_server("gina")


def test_client_from_outside_finds_the_service_and_the_users_project(hub: Hub):
    hub.add_project("maps", ["hugo"], {})
    client = Client(hub.url, hub.user_token("hugo"))
    assert client.url == hub.url + "/services/kpl/api/"
    assert client.project == "maps"
    assert client.version()["version"]
    assert client.datasets() == []
    hub.add_project("roads", ["hugo"], {})
    with pytest.raises(BadRequest, match="several projects: maps, roads"):
        Client(hub.url + "/hub/", hub.user_token("hugo"))
    assert Client(hub.url + "/hub/", hub.user_token("hugo"), project="roads").project == "roads"
