"""Run folder files: what the platform reads as its own word."""

from __future__ import annotations

import os

import pytest

from kpl_lab.engine.runfolder import read_own_json


def test_read_own_json_takes_only_a_plain_file_this_account_wrote(tmp_path):
    ours = tmp_path / "status.json"
    ours.write_text('{"pid": 1}')
    ours.chmod(0o640)
    assert read_own_json(ours) == {"pid": 1}
    assert read_own_json(tmp_path / "missing.json") is None

    link = tmp_path / "link.json"
    link.symlink_to(ours)
    assert read_own_json(link) is None  # a link could point anywhere the platform may read

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read_own_json(fifo) is None  # and returns at once: no wait for a writer


def test_read_own_json_refuses_another_accounts_file(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a file away")
    theirs = tmp_path / "replica.json"
    theirs.write_text('{"argv": ["sh"]}')
    os.chown(theirs, 65534, 65534)  # nobody's
    assert read_own_json(theirs) is None
