"""The platform's rules: an edit stands until its source changes; a configuration only seeds what nobody edited."""

from __future__ import annotations

import pytest

from kpl_lab.catalog.rules import MACHINE, PROFILES, QUOTA, Rules

pytestmark = pytest.mark.databases

CONFIGURED = [{"slug": "small"}]
EDITED = [{"slug": "tiny"}]


def test_an_edit_made_before_the_configuration_was_ever_loaded_stands(platform):
    rules = Rules(platform)
    rules.set(PROFILES, MACHINE, EDITED)  # an administrator, before the hub's first spawn form
    assert rules.load(PROFILES, MACHINE, CONFIGURED, seed=True) is False
    assert rules.read(PROFILES) == EDITED
    assert rules.load(PROFILES, MACHINE, CONFIGURED, seed=True) is False
    # the configuration itself changed: it loads
    assert rules.load(PROFILES, MACHINE, [{"slug": "large"}], seed=True) is True
    assert rules.read(PROFILES) == [{"slug": "large"}]


def test_a_configuration_seeds_what_nobody_edited_and_later_edits_stand(platform):
    rules = Rules(platform)
    assert rules.load(PROFILES, MACHINE, CONFIGURED, seed=True) is True
    assert rules.read(PROFILES) == CONFIGURED
    rules.set(PROFILES, MACHINE, EDITED)
    assert rules.load(PROFILES, MACHINE, CONFIGURED, seed=True) is False
    assert rules.read(PROFILES) == EDITED


def test_a_live_source_first_seen_after_an_edit_applies(platform):
    """A hub group's quota property set after a REST edit is the newer of the two."""
    rules = Rules(platform)
    rules.set(QUOTA, "vision", {"cpu": 2})
    assert rules.load(QUOTA, "vision", {"cpu": 4}) is True
    assert rules.read(QUOTA, "vision") == {"cpu": 4}


def test_an_edit_after_the_admin_page_wrote_both_stands_at_the_next_load(platform):
    """The admin page writes a group's property and the rule at once; a REST edit after it is not undone."""
    rules = Rules(platform)
    rules.set(QUOTA, "vision", {"cpu": 2}, sourced=True)  # the page: property and rule
    rules.set(QUOTA, "vision", {"cpu": 3})  # PUT /kpl/api/quota, before the next round
    assert rules.load(QUOTA, "vision", {"cpu": 2}) is False  # the round finds the property unchanged
    assert rules.read(QUOTA, "vision") == {"cpu": 3}
