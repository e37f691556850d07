"""The kernel side stands apart: importing or using it in a fresh interpreter loads nothing of the server side.

Each check runs in a new Python process (`-X importtime`), as a kernel starts: the test
process itself has long loaded the server. Run with `-s` to see each entry point's import time.
"""

from __future__ import annotations

import json
import os
import pkgutil
import re
import subprocess
import sys

import pytest

import kpl_lab.notebook

# what only the server side needs: the database, the query engine, Arrow, the web server, and
# kpl_lab's packages that hold the platform, its CLI and the engine that checks and runs pipelines
SERVER_SIDE = (
    "sqlalchemy",
    "alembic",
    "duckdb",
    "pyarrow",
    "kpl_dataset",
    "tornado",
    "jupyter_server",
    "optuna",
    "ray",
    "kpl_lab.platform",
    "kpl_lab.catalog",
    "kpl_lab.engine",
    "kpl_lab.rounds",
    "kpl_lab.experiments",
    "kpl_lab.serving",
    "kpl_lab.server_ext",
    "kpl_lab.hub",
    "kpl_lab.spawner",
    "kpl_lab.sandbox",
    "kpl_lab.privileged",
    "kpl_lab.cli",
    *(
        f"kpl_lab.pipelines.{module}"
        for module in ("validate", "nodes", "schema", "sql", "processors", "fuse", "runner", "cache", "work")
    ),
)

LOAD_EXT = """
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config
config = Config()
config.HistoryManager.enabled = False
shell = InteractiveShell.instance(config=config)
shell.run_line_magic("load_ext", "kpl_lab")
assert "kpl_train" in shell.magics_manager.magics["line"]
"""

ENTRY_POINTS = {
    "kpl_lab.client": "from kpl_lab.client import Client",
    "kpl_lab.experiment": "from kpl_lab.experiment import Experiment",
    "kpl_lab.widgets": "from kpl_lab.widgets import "
    "DatasetPreview, JobMonitor, JobProgress, MetricChart, MetricPlot, PipelineBuilder",
    "%load_ext kpl_lab": LOAD_EXT,
    **{
        module.name: f"import {module.name}"
        for module in pkgutil.walk_packages(kpl_lab.notebook.__path__, "kpl_lab.notebook.")
    },
}

# run `code`, then name the server-side modules loaded and how long the code took
PROBE = """
import json, sys, time
SERVER_SIDE = {server_side!r}
started = time.perf_counter()
exec(compile({code!r}, "<kernel code>", "exec"))
seconds = time.perf_counter() - started
loaded = sorted({{p for p in SERVER_SIDE for m in sys.modules if m == p or m.startswith(p + ".")}})
print(json.dumps({{"seconds": seconds, "server_side": loaded}}))
"""


def run_in_kernel(code: str, env: dict[str, str] | None = None) -> tuple[dict, str]:
    """Run code in a fresh interpreter; return what it loaded and its stderr (with `-X importtime`)."""
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(sys.path)}
    probe = PROBE.format(server_side=SERVER_SIDE, code=code)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def import_seconds(importtime: str, top: str) -> float:
    """Return the cumulative time `-X importtime` gives the first import of package `top`."""
    for line in importtime.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)$", line)
        if found and found.group(3) == top:
            return int(found.group(1)) / 1e6
    return 0.0


def test_the_entry_points_are_the_documented_ones():
    assert {"kpl_lab.notebook.client", "kpl_lab.notebook.magics", "kpl_lab.notebook.widgets.pipeline"} <= set(
        ENTRY_POINTS
    )


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_importing_the_kernel_side_loads_nothing_of_the_server(entry, record_property):
    found, importtime = run_in_kernel(ENTRY_POINTS[entry])
    record_property("seconds", round(found["seconds"], 3))
    record_property("kpl_lab importtime", import_seconds(importtime, "kpl_lab"))
    print(f"{entry}: {found['seconds']:.3f} s ({import_seconds(importtime, 'kpl_lab'):.3f} s in kpl_lab)")
    assert found["server_side"] == []


PIPELINE = """\
version: 1
name: probe
nodes:
  raw: {type: dataset, dataset: shapes}
  images: {type: select, input: raw, where: "path LIKE 'images/%'"}
"""

# every magic and widget used against the server, as in a JupyterLab kernel (widgets on)
USE = """
import pathlib, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config
config = Config()
config.HistoryManager.enabled = False
shell = InteractiveShell.instance(config=config)
shell.run_line_magic("load_ext", "kpl_lab")
magics = shell.magics_manager.registry["KPLMagics"]
magics.use_widgets = True

def cell(line):
    with capture_output() as captured:
        result = shell.run_cell(line)
    sys.stderr.write(f"{line}\\n{captured.stdout}{captured.stderr}\\n")
    assert result.error_in_exec is None, (line, result.error_in_exec)

cell("%kpl_datasets")
cell("%kpl_algorithms")
cell("%kpl_train toy --input data=shapes --param steps=2 --wait")
job = magics.client.jobs()[0]["id"]
sys.stderr.write(f"job {job}: {magics.client.job(job)['state']}\\n")
for line in (f"%kpl_jobs", f"%kpl_logs {job}", f"%kpl_metrics {job}", f"%kpl_compare {job} {job}"):
    cell(line)
cell("%kpl_tune refused toy --input data=shapes --space steps=many --objective training/accuracy")
cell(f"%kpl_pipeline validate {PIPELINE_FILE}")

from kpl_lab.errors import BadRequest
from kpl_lab.experiment import Experiment
from kpl_lab.widgets import DatasetPreview, PipelineBuilder

DatasetPreview("shapes", client=magics.client).next_page()
builder = PipelineBuilder("probe", client=magics.client)
builder.add_node("dataset", "raw", dataset="shapes")
builder.add_node("select", "images", input="raw", where="true")
assert builder.validation["ok"], builder.validation
try:
    Experiment("refused", "toy", {"steps": {"type": "int", "low": 2, "high": 4}}, "training/accuracy",
               sampler="nope", client=magics.client).start()
except BadRequest as error:
    sys.stderr.write(f"Experiment refused: {error.field}\\n")
"""


def test_using_the_magics_and_widgets_loads_nothing_of_the_server(kpl_server, kpl_data, tmp_path):
    file = tmp_path / "probe.kpl-pipeline.yaml"
    file.write_text(PIPELINE)
    env = {"KPL_API_URL": kpl_server.url + "kpl/api/", "KPL_API_TOKEN": kpl_server.token}
    found, shown = run_in_kernel(f"PIPELINE_FILE = {str(file)!r}\n" + USE, env)
    # each path ran: a job waited for, compared; the search space refused before the server; the file valid
    assert re.search(r"^job \S+: succeeded$", shown, re.M), shown[-3000:]
    assert "%kpl_tune: --space 'steps=many': expected NAME=float" in shown
    assert f"{file}: valid" in shown and "Experiment refused: sampler" in shown
    assert found["server_side"] == []
