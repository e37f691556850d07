"""Report the public names of kpl-dataset 0.0.9 / kpl-helper 0.1.3 modules and their signatures.

Each observation is one module's names -> {"defined in": module, "signature": ...}, the
signature [[parameter, kind, default], ...] of a function or {"class": {method: signature}}
of a class.
The test checks that old code calling the original's way (positionally or by keyword)
calls ours the same way: see test_compare_original.compatible().
"""

import importlib
import inspect

import _report as report

MODULES = [
    "kpl_dataset",
    "kpl_dataset.common",
    "kpl_dataset.dataset",
    "kpl_dataset.record",
    "kpl_helper",
    "kpl_helper.base",
    "kpl_helper.cli.main",
    "kpl_helper.deploy",
    "kpl_helper.io",
    "kpl_helper.metric",
    "kpl_helper.parameter",
    "kpl_helper.progress",
    "kpl_helper.result",
    "kpl_helper.save",
    "kpl_helper.stop",
]
METHODS = {"__init__", "__getitem__", "__len__", "__iter__", "__next__"}


def signature(function):
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    return [
        [p.name, p.kind.name, None if p.default is inspect.Parameter.empty else repr(p.default)]
        for p in parameters
    ]


def describe(value):
    if inspect.isclass(value):
        methods = {
            name: signature(member)
            for name, member in vars(value).items()
            if callable(member) and (not name.startswith("_") or name in METHODS)
        }
        return {"class": methods}
    return signature(value)


for name in MODULES:
    module = importlib.import_module(name)
    package = name.split(".")[0]
    names = {}
    for attribute in dir(module):  # as a caller reaches them: with names a package loads on first use
        value = getattr(module, attribute)
        if attribute.startswith("_") or not callable(value):
            continue
        home = getattr(value, "__module__", "") or ""
        if home.startswith(package):  # not what it imports from os, json, typing ...
            names[attribute] = {"defined in": home, "signature": describe(value)}
    report.value(name, names)
report.done()
