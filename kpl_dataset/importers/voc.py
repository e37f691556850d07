"""Convert Pascal VOC (JPEGImages + Annotations XML) into detection records."""

from __future__ import annotations

import os
import posixpath
import xml.etree.ElementTree as ET

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.importers.archive import Entry, Source, open_source
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.raw import content_type
from kpl_dataset.importers.safety import ImportFailed, Limits
from kpl_dataset.importers.xmlsafe import parse_xml

DETECTION_TYPE = {
    "path": BasicType.String,
    "contentType": BasicType.String,
    "content": BasicType.ByteArray,
    "width": BasicType.Int,
    "height": BasicType.Int,
    "object": [
        {
            "name": BasicType.String,
            "xmin": BasicType.Int,
            "ymin": BasicType.Int,
            "xmax": BasicType.Int,
            "ymax": BasicType.Int,
            "difficult": BasicType.Int,
        }
    ],
}


def _number(node: ET.Element, tag: str, where: str, default: int | None = None) -> int:
    text = node.findtext(tag)
    if text is None or not text.strip():
        if default is not None:
            return default
        raise ImportFailed(f"{where}: missing <{tag}>")
    try:
        return round(float(text))
    except ValueError:
        raise ImportFailed(f"{where}: <{tag}> {text.strip()!r} is not a number") from None


def parse_annotation(data: bytes, where: str) -> tuple[str, int, int, list[dict]]:
    """Return (filename, width, height, objects) of one VOC annotation."""
    root = parse_xml(data, where)
    if root.tag != "annotation":
        raise ImportFailed(f"{where}: root element is <{root.tag}>, not <annotation>")
    filename = (root.findtext("filename") or "").strip()
    size = root.find("size")
    width = _number(size, "width", f"{where}: size", 0) if size is not None else 0
    height = _number(size, "height", f"{where}: size", 0) if size is not None else 0
    objects = []
    for i, obj in enumerate(root.iter("object")):
        here = f"{where}: object {i}"
        box = obj.find("bndbox")
        if box is None:
            raise ImportFailed(f"{here}: missing <bndbox>")
        objects.append(
            {
                "name": (obj.findtext("name") or "").strip(),
                "xmin": _number(box, "xmin", here),
                "ymin": _number(box, "ymin", here),
                "xmax": _number(box, "xmax", here),
                "ymax": _number(box, "ymax", here),
                "difficult": _number(obj, "difficult", here, 0),
            }
        )
    return filename, width, height, objects


def _image_for(source: Source, xml: Entry, filename: str, by_stem: dict[str, Entry]) -> Entry:
    base = posixpath.dirname(posixpath.dirname(xml.path))
    images = posixpath.join(base, "JPEGImages") if base else "JPEGImages"
    if filename:
        found = source.find(posixpath.join(images, filename))
        if found is not None:
            return found
    stem = posixpath.splitext(posixpath.basename(xml.path))[0]
    found = by_stem.get(posixpath.join(images, stem))
    if found is None:
        shown = posixpath.join(images, filename or stem + ".*")
        raise ImportFailed(f"{xml.path}: image {shown} not found")
    return found


def import_voc(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    part: str | None = None,
    limits: Limits | None = None,
    quiet: bool = True,
) -> dict[str, int]:
    """Write one detection record per VOC annotation of SRC into DEST."""
    with open_source(src, limits) as source:
        xmls = [
            e
            for e in source.entries
            if e.path.lower().endswith(".xml")
            and posixpath.basename(posixpath.dirname(e.path)) == "Annotations"
        ]
        if not xmls:
            raise ImportFailed(f"{src}: no Annotations/*.xml found (not a Pascal VOC tree)")
        by_stem = {
            posixpath.splitext(e.path)[0]: e
            for e in source.entries
            if posixpath.basename(posixpath.dirname(e.path)) == "JPEGImages"
        }
        with DatasetOutput(dest) as out, Progress("voc", len(xmls), quiet=quiet) as progress:
            out.part(part, DETECTION_TYPE)
            for xml in xmls:
                filename, width, height, objects = parse_annotation(source.read(xml), xml.path)
                image = _image_for(source, xml, filename, by_stem)
                out.write(
                    part,
                    {
                        "path": image.path,
                        "contentType": content_type(image.path),
                        "content": source.content(image),
                        "width": width,
                        "height": height,
                        "object": objects,
                    },
                )
                progress.update()
            return out.counts
