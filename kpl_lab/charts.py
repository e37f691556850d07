"""uPlot, the job view's charting library, as shipped in the package for the notebook widgets and the admin page.

The labextension build (`jlpm build:static`, run by `pip install`) copies uPlot's browser
script and stylesheet from its npm package into kpl_lab/static/: nothing is fetched at run time.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

STATIC = Path(__file__).parent / "static"
UPLOT_SCRIPT = "uPlot.iife.min.js"  # a classic script that declares `var uPlot`
UPLOT_CSS = "uPlot.min.css"


@cache
def asset(name: str) -> str:
    """Return the text of a file of kpl_lab/static, or say how to build it."""
    path = STATIC / name
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is missing: the package build copies uPlot there (`pip install .`, "
            "or `jlpm build:static` in labextension/ after `jlpm install`)"
        ) from None
