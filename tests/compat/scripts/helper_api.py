"""Call kpl_helper as kpl-helper 0.1.3 code does; report what it returns.

The test runs this script outside the platform, in a job and in a notebook
(COMPAT_WHERE says which); paths are reported relative to the job's folders.
"""

import os
import sys
from pathlib import Path

import _report as report
import yaml

import kpl_helper as helper
from kpl_helper import deploy, io, metric, progress, result, stop
from kpl_helper.base import get_config
from kpl_helper.cli.main import main as khelper_main

where = os.environ["COMPAT_WHERE"]
work = os.environ["COMPAT_WORK"]  # a scratch folder (in a job: the parent of inputs/ and outputs/)


def relative(path):
    return os.path.relpath(path, work) if path else path


report.value("khelper main is callable", callable(khelper_main))
report.value("original classes", [callable(progress.Metric().send_progress), callable(stop.StopTask().stop)])

config = get_config()
report.value(
    "config",
    {
        "inner": config.get_inner(),
        "env_type": config.get_env_type(),
        "input_root": relative(config.get_input_root()),
        "output_root": relative(config.get_output_root()),
        "parameter": yaml.safe_load(config.get_parameter()) if config.get_parameter() else None,
    },
)
report.call("get_task_id", config.get_task_id)
accessors = ("get_api_url", "get_jwt_token", "get_metric_api", "get_metric_token", "get_cluster")
if where == "outside":
    for name in accessors:
        report.call(name, getattr(config, name))
else:  # inside, their values are the platform's own (KPL_API_URL, ... here): only the names must match
    report.value("platform accessors", [callable(getattr(config, name)) for name in accessors])

parameter_file = os.path.join(work, "parameter.yml")
with open(parameter_file, "w") as f:
    f.write("lr: 0.01\nnet:\n  depth: 50\n  names: [a, b]\n")
if where == "job":
    parameters = helper.get_parameter()
else:
    report.call("get_parameter with no default", helper.get_parameter, gist="Not found parameter")
    parameters = helper.get_parameter(default=parameter_file)
report.value("parameters", parameters)
report.value("parameters by attribute", [parameters.lr, parameters.net.depth, parameters["net"]["names"]])
report.value(
    "get_parameter returns the same object", helper.get_parameter(default=parameter_file) is parameters
)
report.call("missing parameter attribute", lambda: parameters.absent, gist="absent")

report.call("input path", lambda: relative(io.get_input_path("data", default="local-data")))
report.call("output path", lambda: relative(io.get_output_path("model", default="local-out")))
report.value("output folder exists", os.path.isdir(os.path.join(work, "outputs", "model")))
if where == "job":
    report.call("missing input", lambda: io.get_input_path("absent"), gist="absent")

out = os.path.join(work, "written", "parameter.yml")
sys.argv = ["helper", "write", out]
report.call("write_parameter", helper.write_parameter)
report.value("written parameters", yaml.safe_load(Path(out).read_text()) if os.path.exists(out) else None)

model = os.path.join(work, "model.bin")
with open(model, "wb") as f:
    f.write(b"weights")
report.call("save_model", lambda: helper.save_model(model, "m", "desc"))
report.call(
    "save_dataset missing path", lambda: helper.save_dataset(os.path.join(work, "absent"), "d", "desc")
)
report.call("ready", helper.ready)
figure = metric.MetricFigure("loss", y1_name="train", y2_name="val")
report.call("push_metric", lambda: figure.push_metric(1, 0.5, 0.7))
report.call("send_scalar_result", lambda: result.send_scalar_result(acc=0.9))
if where == "outside":  # inside, the original posts to its platform, which is not here
    report.call("send_progress", lambda: helper.send_progress(0.5))
    report.call("Metric().send_progress", lambda: progress.Metric().send_progress(1.5))
    report.call("kill", helper.kill)
report.call("done", helper.done)

detection = deploy.RectangleBoxObjectDetectionResponse(480, 640, 3)
detection.add_object("dog", 1.9, 2, 30, 40, "0.5")
report.value("detection response", detection.dumps())
report.value("classification response", deploy.ClassificationResponse.dumps(1, 2, 3, 4, "cat"))
report.value("segmentation response", deploy.SegmentationResponse.dumps(1, 2, 3, [[0, 1]], error="e"))
report.done()
