"""Hatch hooks (the same file in every standalone/ folder): ship a package folder of the KPL Lab repository as its own distribution.

The sources and the version live at the repository root (`../../<package>`,
`../../kpl_lab/_version.py`); an sdist carries its own copy of the package and PKG-INFO.
"""

import re
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.metadata.plugin.interface import MetadataHookInterface

REPO_ROOT = Path("..", "..")


class SharedVersionHook(MetadataHookInterface):
    """Take the version of kpl-lab, or the one recorded in the sdist's PKG-INFO."""

    PLUGIN_NAME = "custom"

    def update(self, metadata: dict) -> None:
        """Set `version` in the project metadata."""
        version_file = Path(self.root, REPO_ROOT, "kpl_lab", "_version.py")
        pkg_info = Path(self.root, "PKG-INFO")
        if version_file.is_file():
            text, pattern = version_file.read_text(), r'^__version__ = "([^"]+)"$'
        elif pkg_info.is_file():
            text, pattern = pkg_info.read_text(), r"^Version: (\S+)$"
        else:
            raise FileNotFoundError(f"{self.root}: neither {version_file} nor PKG-INFO exists")
        match = re.search(pattern, text, re.MULTILINE)
        if match is None:
            raise ValueError(f"{self.root}: no version found by {pattern!r}")
        metadata["version"] = match.group(1)


class SharedSourceHook(BuildHookInterface):
    """Include `../../<package>` from the repository; an sdist's own `./<package>` is picked up by default."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        """Add the package folder named by the `package` option to the build."""
        package = self.config["package"]
        shared = Path(self.root, REPO_ROOT, package)
        if shared.is_dir():
            build_data["force_include"][str(shared.resolve())] = package
        elif not Path(self.root, package).is_dir():
            raise FileNotFoundError(
                f"{self.root}: package folder {package!r} not found here or two levels up"
            )
