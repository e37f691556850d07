"""deploy/monitoring: Prometheus' rules and config checked by promtool, and the dashboards' queries use real metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kpl_lab.monitoring.monitor import Monitor

from .conftest import two_gpus
from .test_metrics import populate

MONITORING = Path(__file__).parents[3] / "deploy" / "monitoring"
RULES = MONITORING / "prometheus" / "kpl-lab.rules.yml"
DASHBOARDS = sorted((MONITORING / "grafana").glob("*.json"))
NAME = re.compile(r"\b(kpl[_:][A-Za-z0-9_:]+)")
promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool: apt-get install prometheus (.ci/run does)"
)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@promtool
def test_the_rules_are_valid_and_their_unit_tests_pass():
    checked = run("check", "rules", RULES.name, cwd=RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run("test", "rules", "kpl-lab.rules.test.yml", cwd=RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@promtool
def test_the_example_config_is_valid(tmp_path):
    token = tmp_path / "kpl-lab.token"
    token.write_text("secret\n")
    config = (
        (RULES.parent / "prometheus.yml").read_text().replace("/etc/prometheus/kpl-lab.token", str(token))
    )
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(RULES, tmp_path / RULES.name)
    checked = run("check", "config", "prometheus.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",)}


def exposed(platform) -> set[str]:
    """Return every metric and sample name the platform exposes (a family's samples' names by its type)."""
    populate(platform)
    monitor = Monitor(platform)
    monitor.nvml = two_gpus()
    monitor.sample(force=True)
    try:
        names = set()
        for family in text_string_to_metric_families(generate_latest(REGISTRY).decode()):
            names.add(family.name)
            names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
        return names
    finally:
        monitor.close()


def test_the_rules_and_dashboards_use_only_exposed_metrics(platform):
    rules = yaml.safe_load(RULES.read_text())
    recorded = {rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule}
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    assert DASHBOARDS, "no dashboard in deploy/monitoring/grafana"
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        assert board["uid"].startswith("kpl-lab-") and board["title"].startswith("KPL Lab")
        ids = [panel["id"] for panel in board["panels"]]
        assert len(ids) == len(set(ids)), f"{path.name}: two panels share an id"
        for panel in board["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", f"{path.name}: {panel['title']}"
            expressions += [target["expr"] for target in panel["targets"]]
        for variable in board["templating"]["list"][1:]:
            expressions.append(variable["query"]["query"])
    names = exposed(platform) | recorded
    unknown = {name for expression in expressions for name in NAME.findall(expression)} - names
    assert unknown == set()
    # and the platform's own names of its families are documented where admins look
    guide = (Path(__file__).parents[3] / "docs" / "admin-guide.md").read_text()
    families = {
        name
        for name in names
        if name.startswith("kpl_") and not name.endswith(("_bucket", "_count", "_sum", "_created"))
    }
    undocumented = {name for name in families if name.removesuffix("_total") not in guide}
    assert undocumented == set()
