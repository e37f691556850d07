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
        ("record_define.py", "outside"),
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


POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
# Names the original defined for its own use, which no user code calls.
INTERNALS = {
    "kpl_helper.save.Uploader": "its upload client",
    "kpl_helper.save.assert_symbol_link": "an upload check",
    "kpl_helper.save.is_archive_file": "an upload check",
}


def call_problems(where: str, original: list | None, ours: list | None) -> list[str]:
    """Return how a call written for the original signature would fail or change with ours."""
    if original is None:
        return []
    if ours is None:
        return [f"{where}: ours has no signature to check"]
    kinds = {kind for _, kind, _ in ours}
    names = {name for name, _, _ in ours}
    old = [p for p in original if p[1] in POSITIONAL]
    new = [p for p in ours if p[1] in POSITIONAL]
    problems = []
    for i, (name, kind, default) in enumerate(old):
        if i >= len(new):
            if "VAR_POSITIONAL" not in kinds:
                problems.append(f"{where}: takes no argument {i + 1} ({name})")
            continue
        their, _, their_default = new[i]
        if their != name and kind != "POSITIONAL_ONLY":
            problems.append(f"{where}: argument {i + 1} is {their!r}, was {name!r}")
        if default is not None and their_default != default:
            problems.append(f"{where}: {name} defaults to {their_default}, was {default}")
    for name, kind, _ in original:
        if kind == "KEYWORD_ONLY" and name not in names and "VAR_KEYWORD" not in kinds:
            problems.append(f"{where}: no keyword {name}")
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD") and kind not in kinds:
            problems.append(f"{where}: no {'*' if kind == 'VAR_POSITIONAL' else '**'}{name}")
    known = {name for name, _, _ in original}
    for name, kind, default in ours:
        if default is None and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD") and name not in known:
            problems.append(f"{where}: new required argument {name}")
    return problems


def signature_problems(original: dict, ours: dict) -> list[str]:
    """Return each public name of the original that ours lacks or that old calls would break."""
    problems = []
    for module in sorted(original):
        theirs = ours.get(module, {}).get("value", {})
        for name, entry in sorted(original[module]["value"].items()):
            where = f"{module}.{name}"
            if "." in module and entry["defined in"] != module:
                continue  # a module's import from its sibling, checked there (a package's exports count)
            if where in INTERNALS:
                continue
            if name not in theirs:
                problems.append(f"{where}: missing")
                continue
            old, new = entry["signature"], theirs[name]["signature"]
            if isinstance(old, dict):
                if not isinstance(new, dict):
                    problems.append(f"{where}: no longer a class")
                    continue
                for method, signature in sorted(old["class"].items()):
                    if method not in new["class"]:
                        problems.append(f"{where}.{method}: missing")
                    else:
                        problems += call_problems(f"{where}.{method}", signature, new["class"][method])
            elif isinstance(new, dict):
                problems.append(f"{where}: now a class")
            else:
                problems += call_problems(where, old, new)
    return problems


@pytest.mark.slow  # builds a virtual environment on its first run
def test_old_calls_fit_our_signatures(original_python, tmp_path):
    original = run_script(original_python, "api_signatures.py", "outside", tmp_path / "original", False)
    ours = run_script(Path(sys.executable), "api_signatures.py", "outside", tmp_path / "ours", True)
    assert "write_parameter" in original["kpl_helper.parameter"]["value"]
    problems = signature_problems(original, ours)
    assert not problems, "old calls would not fit ours:\n" + "\n".join(problems)


def test_signature_problems_catch_what_old_calls_would_hit():
    def module(**names):
        return {"value": {name: {"defined in": "m", "signature": sig} for name, sig in names.items()}}

    required = ["path", "POSITIONAL_OR_KEYWORD", None]
    original = {
        "m": module(
            same=[required],
            renamed=[required],
            default=[required, ["n", "POSITIONAL_OR_KEYWORD", "1"]],
            gone=[required],
            grew=[required],
            cls={"class": {"put": [required]}},
        )
    }
    ours = {
        "m": module(
            same=[required, ["extra", "KEYWORD_ONLY", "False"]],
            renamed=[["file", "POSITIONAL_OR_KEYWORD", None]],
            default=[required, ["n", "POSITIONAL_OR_KEYWORD", "2"]],
            grew=[required, ["mode", "POSITIONAL_OR_KEYWORD", None]],
            cls={"class": {}},
        )
    }
    found = signature_problems(original, ours)
    assert [line.split(":")[0] for line in found] == [
        "m.cls.put",
        "m.default",
        "m.gone",
        "m.grew",
        "m.renamed",
        "m.renamed",
    ]
