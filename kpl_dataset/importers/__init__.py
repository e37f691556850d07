"""Turn uploads (folders, zip and tar files, VOC, COCO, labelme, ImageFolder, 0.0.9 datasets) into datasets."""

from kpl_dataset.importers.archive import Entry, Source, open_source
from kpl_dataset.importers.coco import import_coco
from kpl_dataset.importers.imagefolder import import_imagefolder, parse_split
from kpl_dataset.importers.labelme import import_labelme
from kpl_dataset.importers.legacy import migrate_legacy
from kpl_dataset.importers.raw import content_type, import_raw
from kpl_dataset.importers.safety import ImportFailed, Limits, UnsafeEntry
from kpl_dataset.importers.voc import import_voc

__all__ = [
    "Entry",
    "ImportFailed",
    "Limits",
    "Source",
    "UnsafeEntry",
    "content_type",
    "import_coco",
    "import_imagefolder",
    "import_labelme",
    "import_raw",
    "import_voc",
    "migrate_legacy",
    "open_source",
    "parse_split",
]
