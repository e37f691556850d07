"""A virtual environment with the original kpl-dataset 0.0.9 and kpl-helper 0.1.3 from PyPI.

It is created once and reused across sessions from a cache folder: $KPL_COMPAT_CACHE, else
~/.cache/kpl-lab/compat (`kpl_lab.testing.environments`). The originals share our import
names, so they live only there. Without PyPI the comparison is skipped, except under CI
(CI set), where it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kpl_lab.testing import environments


@pytest.fixture(scope="session")
def original_python() -> Path:
    """Return the python of the environment holding the original packages, building it if needed."""
    try:
        return environments.original_python()
    except environments.Unavailable as error:
        if os.environ.get("CI"):
            pytest.fail(str(error))
        pytest.skip(str(error))
