"""Parse untrusted XML: no DTDs, so no entity expansion or external references."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kpl_dataset.importers.safety import ImportFailed, UnsafeEntry


def parse_xml(data: bytes, where: str) -> ET.Element:
    """Return the root element of DATA, refusing DTDs and naming WHERE on errors."""
    head = data[:4096].lower()
    if b"<!doctype" in head or b"<!entity" in data.lower():
        raise UnsafeEntry(f"{where!r}: XML with a DTD or entities refused")
    try:
        return ET.fromstring(data)
    except ET.ParseError as exc:
        raise ImportFailed(f"{where}: bad XML: {exc}") from None
