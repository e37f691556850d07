"""Import the files of a folder, zip or tar as records of path, contentType and content."""

from __future__ import annotations

import mimetypes
import os

from kpl_dataset import BasicType
from kpl_dataset._progress import Progress
from kpl_dataset.importers.archive import open_source
from kpl_dataset.importers.output import DatasetOutput
from kpl_dataset.importers.safety import Limits

RAW_TYPE = {"path": BasicType.String, "contentType": BasicType.String, "content": BasicType.ByteArray}

# A private table (no /etc/mime.types) so the same file gets the same type on every machine.
_MIME = mimetypes.MimeTypes()
for _ext, _type in {
    ".xml": "application/xml",
    ".webp": "image/webp",
    ".yml": "application/yaml",
    ".yaml": "application/yaml",
    ".md": "text/markdown",
}.items():
    _MIME.add_type(_type, _ext)


def content_type(path: str) -> str:
    """Guess the MIME type of PATH from its extension."""
    guessed, _ = _MIME.guess_type(path, strict=False)
    return guessed or "application/octet-stream"


def import_raw(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    part: str | None = None,
    limits: Limits | None = None,
    quiet: bool = True,
) -> dict[str, int]:
    """Write every file of SRC as one record of a new part of DEST; return records per part."""
    with open_source(src, limits) as source, DatasetOutput(dest) as out:
        out.part(part, RAW_TYPE)
        with Progress("import", len(source.entries), quiet=quiet) as progress:
            for entry in source.entries:
                out.write(
                    part,
                    {
                        "path": entry.path,
                        "contentType": content_type(entry.path),
                        "content": source.content(entry),
                    },
                )
                progress.update()
        return out.counts
