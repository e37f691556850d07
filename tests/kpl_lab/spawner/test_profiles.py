"""Profiles: configuration mistakes named by entry and field; one validation of user_options."""

from __future__ import annotations

import pytest

from kpl_lab.errors import BadRequest
from kpl_lab.spawner.profiles import allowed_profiles, parse_profiles, resolve

from .conftest import PROFILES


@pytest.fixture
def profiles():
    return parse_profiles(PROFILES)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([{"display_name": "x"}], r"profiles\[0\]\.slug: expected lowercase"),
        ([{"slug": "a"}, {"slug": "a"}], r"profiles\[1\]\.slug: 'a' is used by an earlier profile"),
        ([{"slug": "a", "cpu": 4, "cpu_max": 2}], r"profiles\[0\]\.cpu: default 4 is over the maximum 2"),
        ([{"slug": "a", "memory": "lots"}], r"profiles\[0\]\.memory: expected a number, got 'lots'"),
        ([{"slug": "a", "accelerator": "tpu"}], r"profiles\[0\]\.accelerator: expected one of gpu, npu"),
        ([{"slug": "a", "accelerators_max": 1}], r"profiles\[0\]\.accelerators_max: set 'accelerator'"),
        ([{"slug": "a", "gpus": 1}], r"profiles\[0\]: unknown field\(s\) gpus"),
        (["a"], r"profiles\[0\]: expected a dict, got str"),
    ],
)
def test_configuration_mistakes_are_named(entries, message):
    with pytest.raises(ValueError, match=message):
        parse_profiles(entries)


def test_maximum_defaults_to_the_default():
    (profile,) = parse_profiles([{"slug": "a", "cpu": 2, "memory_max": 1024}])
    assert (profile.cpu, profile.cpu_max) == (2, 2)
    assert (profile.memory, profile.memory_max) == (1024, 1024)  # the default is capped by the maximum


def test_only_profiles_of_the_users_projects(profiles):
    assert [p.slug for p in allowed_profiles(profiles, ["nlp"])] == ["cpu", "shared"]
    assert [p.slug for p in allowed_profiles(profiles, ["nlp", "vision"])] == ["cpu", "gpu", "shared"]


def test_defaults_when_nothing_is_asked(profiles):
    choice = resolve({}, profiles, ["vision"], "default")
    assert (choice.profile.slug, choice.project, choice.cpu, choice.memory) == ("cpu", "vision", 1, 512)
    assert choice.resources.devices == {}
    assert resolve({}, profiles, [], "default").project == "default"


def test_choice_within_the_profile(profiles):
    options = {"profile": "gpu", "project": "vision", "cpu": "3", "memory": 2048, "accelerators": 2}
    choice = resolve(options, profiles, ["nlp", "vision"], "default")
    assert (choice.cpu, choice.memory, choice.accelerators) == (3.0, 2048, 2)
    assert choice.resources.devices == {"gpu": 2}
    assert choice.to_options() == {
        "profile": "gpu",
        "project": "vision",
        "cpu": 3.0,
        "memory": 2048,
        "shm": 64,
        "accelerators": 2,
    }


@pytest.mark.parametrize(
    ("options", "projects", "message", "field"),
    [
        (
            {"profile": "huge"},
            ["vision"],
            "unknown profile 'huge': choose one of cpu, gpu, shared",
            "profile",
        ),
        (
            {"profile": "gpu"},
            ["nlp"],
            "profile 'gpu' is not available to project 'nlp' (projects: vision)",
            "profile",
        ),
        (
            {"profile": "gpu", "accelerators": 3},
            ["vision"],
            "accelerators 3 is over the maximum 2 of profile 'gpu'",
            "accelerators",
        ),
        (
            {"profile": "cpu", "memory": 5000},
            ["vision"],
            "memory 5000 is over the maximum 4096 of profile 'cpu'",
            "memory",
        ),
        (
            {"profile": "cpu", "accelerators": 1},
            ["vision"],
            "accelerators 1 is over the maximum 0 of profile 'cpu'",
            "accelerators",
        ),
        ({"cpu": -1}, ["vision"], "cpu: expected a number >= 0.01, got -1", "cpu"),
        ({"memory": 1500.5}, ["vision"], "memory: expected a whole number, got 1500.5", "memory"),
        ({"cpu": True}, ["vision"], "cpu: expected a number, got True", "cpu"),
        ({"cpu": "two"}, ["vision"], "cpu: expected a number, got 'two'", "cpu"),
        ({"image": "evil"}, ["vision"], "unknown option(s) image", "image"),
        ({"project": "vision"}, ["nlp"], "you are not a member of project 'vision'", "project"),
        ({}, ["nlp", "vision"], "choose a project: one of nlp, vision", "project"),
    ],
)
def test_refusals_say_what_is_wrong(profiles, options, projects, message, field):
    with pytest.raises(BadRequest) as caught:
        resolve(options, profiles, projects, "default")
    assert caught.value.message.startswith(message)
    assert caught.value.field == field


def test_not_a_dict(profiles):
    with pytest.raises(BadRequest, match="user_options: expected an object, got list"):
        resolve([], profiles, ["vision"], "default")
