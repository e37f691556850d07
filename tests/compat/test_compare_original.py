"""Run the same scripts under the original kpl-dataset 0.0.9 / kpl-helper 0.1.3 and under ours.

Values read back and returned must be equal; where the original raised, ours must raise an
instance of the same class with a message carrying the same gist (see scripts/_report.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
MARKER = "KPL-COMPAT-REPORT "
PARAMETERS = {"lr": 0.1, "net": {"depth": 18, "names": ["x"]}}


def platform_env(where: str, work: Path) -> dict[str, str]:
    """Return the variables of a job or notebook, for both platforms' kpl_helper."""
    (work / "inputs" / "data").mkdir(parents=True)
    (work / "outputs").mkdir()
    (work / "token").write_text("token")
    env = {"COMPAT_WHERE": where, "COMPAT_WORK": str(work)}
    if where == "outside":
        return env
    return {
        **env,
        "KPL_INNER": "1",
        "KPL_ENV": where,
        "KPL_ENV_TASK_ID": "42",
        "KPL_ENV_INPUT_ROOT_PATH": str(work / "inputs"),
        "KPL_ENV_OUTPUT_ROOT_PATH": str(work / "outputs"),
        "KPL_ENV_PARAMETER": json.dumps(PARAMETERS),
        "KPL_EVENTS_FILE": str(work / "events.jsonl"),  # ours
        "KPL_TOKEN_LOCATE": str(work / "token"),  # the original reads it at start
        "KPL_ENV_INTERNAL_API_HOST": "http://127.0.0.1:9",  # the original's platform: refused at once
    }


def run_script(python: Path, script: str, where: str, work: Path, ours: bool, **extra: str) -> dict:
    """Run a script in a clean environment (plus the variables in extra) and return its report."""
    work.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("KPL_", "PYTHON", "COMPAT_", "KUBERNETES_"))
    }
    if ours:
        env["PYTHONPATH"] = str(REPO)
    env.update(platform_env(where, work))
    env.update(extra)
    process = subprocess.run(
        [str(python), str(SCRIPTS / script)], cwd=work, env=env, capture_output=True, text=True, timeout=300
    )
    who = "ours" if ours else "the original"
    assert process.returncode == 0, f"{script} ({where}) failed under {who}:\n{process.stderr[-3000:]}"
    reports = [line[len(MARKER) :] for line in process.stdout.splitlines() if line.startswith(MARKER)]
    assert reports, f"{script} ({where}) printed no report under {who}:\n{process.stdout[-2000:]}"
    return json.loads(reports[-1])


def differences(original: dict, ours: dict) -> list[str]:
    """Return one line per observation where ours does not behave as the original."""
    problems = []
    for name in sorted(original.keys() | ours.keys()):
        a, b = original.get(name), ours.get(name)
        if a is None or b is None:
            problems.append(f"{name}: observed only under {'ours' if a is None else 'the original'}")
        elif "error" in a:
            error = a["error"]
            said = f"the original raised {error['type']}({error['message']!r})"
            if "error" not in b:
                problems.append(f"{name}: {said}; ours returned {b['value']!r}")
                continue
            if error["type"] not in b["error"]["mro"]:
                problems.append(f"{name}: {said}; ours raised {b['error']['type']}, not a subclass of it")
            gist = (error["gist"] or "").lower()
            if gist not in error["message"].lower() or gist not in b["error"]["message"].lower():
                problems.append(
                    f"{name}: {said}; ours said {b['error']['message']!r}: both should mention {error['gist']!r}"
                )
        elif "error" in b:
            problems.append(f"{name}: the original returned {a['value']!r}; ours raised {b['error']}")
        elif a != b:
            problems.append(f"{name}: the original gave {a['value']!r}; ours {b['value']!r}")
    return problems


@pytest.mark.slow  # builds a virtual environment on its first run
@pytest.mark.parametrize(
    "script,where",
    [
        ("dataset_records.py", "outside"),
        ("dataset_errors.py", "outside"),
        ("helper_api.py", "outside"),
        ("helper_api.py", "job"),
        ("helper_api.py", "notebook"),
    ],
)
def test_same_behaviour_as_the_original(original_python, tmp_path, script, where):
    original = run_script(original_python, script, where, tmp_path / "original", ours=False)
    ours = run_script(Path(sys.executable), script, where, tmp_path / "ours", ours=True)
    assert len(original) >= 10  # the script ran to its end under the original
    problems = differences(original, ours)
    assert not problems, f"{script} ({where}) behaves differently from the original:\n" + "\n".join(problems)


@pytest.mark.slow  # builds a virtual environment on its first run
def test_datasets_of_the_original_migrate_with_every_value(original_python, tmp_path):
    shared = str(tmp_path / "written-by-the-original")
    original = run_script(
        original_python, "dataset_migrate.py", "outside", tmp_path / "original", False, COMPAT_DATASET=shared
    )
    ours = run_script(
        Path(sys.executable), "dataset_migrate.py", "outside", tmp_path / "ours", True, COMPAT_DATASET=shared
    )
    assert len(original["train records"]["value"]) == 3
    problems = differences(original, ours)
    assert not problems, "a migrated dataset reads differently:\n" + "\n".join(problems)


def test_differences_catch_what_old_code_would_notice():
    def error(kind, mro, message, gist=None):
        return {"error": {"type": kind, "mro": mro, "message": message, "gist": gist}}

    original = {
        "value": {"value": [1, {"$bytes": "AA=="}]},
        "subclass": error("KeyError", ["KeyError"], "'k'", "k"),
        "other class": error("TypeError", ["TypeError"], "bad"),
        "gist": error("ValueError", ["ValueError"], "value 7 out of range", "7"),
        "raised": error("Exception", ["Exception"], "x"),
    }
    ours = {
        "value": {"value": [1, {"$bytes": "AQ=="}]},
        "subclass": error("DatasetKeyError", ["DatasetKeyError", "KeyError"], "unexpected key 'k'"),
        "other class": error("ValueError", ["ValueError", "Exception"], "bad"),
        "gist": error("DatasetValueError", ["DatasetValueError", "ValueError"], "out of range"),
        "raised": {"value": None},
    }
    found = differences(original, ours)
    assert [line.split(":")[0] for line in found] == ["gist", "other class", "raised", "value"]
