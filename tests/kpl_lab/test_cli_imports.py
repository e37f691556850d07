"""`kpl-lab` loads what a command uses: `--help` and the parser load no database, model or YAML library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "cli_startup.py"
HEAVY = ("sqlalchemy", "pydantic", "yaml", "kpl_lab.platform", "kpl_lab.catalog", "kpl_lab.api.jobs")


def loaded_by(code: str, tmp_path) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        env={"KPL_LAB_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)},
    )
    return set(done.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        "import kpl_lab.cli",
        "from kpl_lab.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
        "from kpl_lab.cli import main\ntry:\n    main(['job', 'submit', '--help'])\nexcept SystemExit:\n    pass",
    ],
)
def test_the_parser_and_help_load_nothing_heavy(code, tmp_path):
    loaded = loaded_by(code, tmp_path)
    assert {name for name in loaded if any(name == h or name.startswith(h + ".") for h in HEAVY)} == set()


def test_the_startup_benchmark_prints_each_command_against_the_floor():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--importtime", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith(("python", "kpl-lab"))]
    names = [" ".join(row[:-2]) for row in rows if len(row) > 2 and row[-1].replace(".", "").isdigit()]
    assert names == ["python -c pass", "kpl-lab --help", "kpl-lab job list", "kpl-lab dataset list"]
    assert "slowest imports of kpl-lab --help" in done.stdout
