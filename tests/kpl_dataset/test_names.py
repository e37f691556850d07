"""A dataset folder's file names, and the package's names loaded on first use."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kpl_dataset
from kpl_dataset.names import check_part_name, manifest_name, part_of


def test_part_of_names_committed_parts_only():
    assert part_of(manifest_name("train")) == "train"
    assert part_of("root.manifest.json") == "root"
    for other in ("root.meta.json", ".root.manifest.json", ".root.manifest.json.1a2b", "a/b.manifest.json"):
        assert part_of(other) is None, other
    assert check_part_name(None) == "root"


def test_the_names_module_loads_without_arrow():
    """Finishing a job asks whether an output folder is a dataset: that must not cost pyarrow's import."""
    code = "import sys, kpl_dataset.names; print(sorted({'pyarrow', 'numpy'} & set(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_every_public_name_loads_on_first_use():
    for name in kpl_dataset.__all__:
        value = getattr(kpl_dataset, name)
        assert value.__module__.startswith("kpl_dataset."), name
    assert set(kpl_dataset.__all__) <= set(dir(kpl_dataset))
    with pytest.raises(AttributeError, match="no attribute 'Dataset'"):
        kpl_dataset.Dataset  # noqa: B018


def test_type_checkers_see_the_names_the_package_loads():
    """The `TYPE_CHECKING` imports that tools read name each public name from its module."""
    tree = ast.parse(Path(kpl_dataset.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If))
    seen = {
        alias.asname: node.module.rpartition(".")[2]
        for node in block.body
        for alias in node.names
        if alias.asname == alias.name
    }
    assert seen == kpl_dataset._MODULE_OF
