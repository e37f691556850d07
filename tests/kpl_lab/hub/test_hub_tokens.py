"""The gateway process under the hub: a user's own API token opens that user's projects, checked by the hub."""

from __future__ import annotations

import pytest

from kpl_lab.errors import Forbidden, NotFound, Unauthorized
from kpl_lab.hub.directory import HubError
from kpl_lab.serving.hub_tokens import ACCESS_SCOPE, HubTokens

from .conftest import SERVICE_TOKEN


@pytest.fixture
def tokens(fake_hub) -> HubTokens:
    return HubTokens(fake_hub.url, SERVICE_TOKEN, "default")


async def test_a_members_token_opens_their_groups_project(fake_hub, tokens):
    token = fake_hub.token("alice", (ACCESS_SCOPE,))
    assert await tokens.project(f"token {token}", "vision") == "vision"
    assert await tokens.project(f"Bearer {token}", "vision") == "vision"


async def test_another_users_project_is_not_found(fake_hub, tokens):
    token = fake_hub.token("alice", (ACCESS_SCOPE,))
    for project in ("audio", None):  # bob's project; the default one, which is not alice's
        with pytest.raises(NotFound) as refused:
            await tokens.project(f"token {token}", project)
        assert refused.value.field == "project"


async def test_a_user_of_no_group_gets_the_default_project_and_an_admin_every_one(fake_hub, tokens):
    assert await tokens.project(f"token {fake_hub.token('carol', (ACCESS_SCOPE,))}", None) == "default"
    admin = fake_hub.token("admin", (ACCESS_SCOPE,))
    for project in ("demo", "vision", "audio", "default"):
        assert await tokens.project(f"token {admin}", project) == project


async def test_no_token_is_unauthorized_with_the_hub_wording(tokens):
    for header in (None, "", "Basic YWxpY2U6eA==", "token "):
        with pytest.raises(Unauthorized) as refused:
            await tokens.project(header, "vision")
        assert "your JupyterHub API token" in str(refused.value) and "deployment key" in str(refused.value)


async def test_a_token_the_hub_does_not_know_is_forbidden(tokens):
    with pytest.raises(Forbidden, match="does not know this token"):
        await tokens.project("token not-a-token", "vision")


async def test_a_token_without_the_gateways_access_scope_is_forbidden(fake_hub, tokens):
    token = fake_hub.token("alice", ("access:services!service=kpl", "read:users!user=alice"))
    with pytest.raises(Forbidden, match=ACCESS_SCOPE):
        await tokens.project(f"token {token}", "vision")
    everything = fake_hub.token("alice", ("access:services",))  # every service's access covers this one
    assert await tokens.project(f"token {everything}", "vision") == "vision"


async def test_the_hubs_answer_is_kept_so_requests_do_not_ask_it_each_time(fake_hub, tokens):
    token = fake_hub.token("alice", (ACCESS_SCOPE,))
    for _ in range(5):
        await tokens.project(f"token {token}", "vision")
    asked = [call for call in fake_hub.calls if call == ("GET", "/hub/api/user")]
    assert len(asked) == 1


async def test_an_unreachable_hub_is_a_502_naming_the_hub():
    tokens = HubTokens("http://127.0.0.1:9/hub/api", SERVICE_TOKEN, "default")
    with pytest.raises(HubError, match="the hub could not check the token") as failed:
        await tokens.project("token something", "vision")
    assert failed.value.status == 502
