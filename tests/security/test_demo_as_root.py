"""`kpl-lab up` as root from a Python its service account cannot read: the demo is there all the same.

The sample data is added as the service account; it once ran in a fork of root's Python (under
/root here), whose first `import sqlite3` failed as that account, and the demo stayed empty
without a word.
"""

from __future__ import annotations

import pwd

from kpl_lab.hub.up import SAMPLE_ALGORITHM, SAMPLE_DATASET, SAMPLE_PROJECT

from .conftest import Up


def test_the_demo_is_added_as_the_service_account(up: Up):
    datasets = up.get(up.api("datasets", SAMPLE_PROJECT), up.admin)
    assert datasets.status_code == 200, datasets.text
    assert [d["name"] for d in datasets.json()["datasets"]] == [SAMPLE_DATASET]
    algorithms = up.get(up.api("algorithms", SAMPLE_PROJECT), up.admin).json()["algorithms"]
    assert SAMPLE_ALGORITHM in [a["name"] for a in algorithms]
    assert "no sample data" not in up.log()
    stored = up.home / "storage"
    owners = {path.stat().st_uid for path in stored.rglob("*") if SAMPLE_DATASET in path.parts}
    assert owners and owners <= {pwd.getpwnam(up.service).pw_uid}
