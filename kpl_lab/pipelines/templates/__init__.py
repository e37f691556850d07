"""Templates shipped for seed 001's three flows: segmentation, classification, detection."""

from __future__ import annotations

from importlib import resources

from ..format import SUFFIX

NAMES = ("segmentation", "classification", "detection")


def template_text(name: str) -> str:
    """Return a template's YAML; KeyError naming the templates when there is none."""
    if name not in NAMES:
        raise KeyError(f"no template {name!r} (templates: {', '.join(NAMES)})")
    return resources.files(__package__).joinpath(name + SUFFIX).read_text(encoding="utf-8")
