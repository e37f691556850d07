"""The node cache: results keyed by node type/version, parameters and input content; checked before reuse."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from kpl_dataset import KPLDatasetError
from kpl_dataset.fs import resolve
from kpl_dataset.manifest import content_hash, load_manifest

MARKER = "node.json"


def key(type_name: str, version: int, params: dict, inputs: dict[str, str]) -> str:
    """Return the cache key of a node: its type and version, parameters and its inputs' content hashes."""
    doc = {"type": type_name, "version": version, "params": params, "inputs": inputs}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def content(folder: Path, part: str = "root") -> str:
    """Return the content hash of a dataset part from its manifest (types and every batch's checksums)."""
    manifest = load_manifest(resolve(folder), part)
    if manifest is None:
        raise KPLDatasetError(f"{folder}: no part {part!r}")
    return content_hash(manifest)


def intact(folder: Path, part: str = "root") -> bool:
    """Return whether a part's manifest loads and every file it names is there with its size."""
    try:
        manifest = load_manifest(resolve(folder), part)
    except KPLDatasetError:
        return False
    if manifest is None:
        return False
    for shard in manifest.shards:
        try:
            if os.path.getsize(folder / shard.path) != shard.bytes:
                return False
        except OSError:
            return False
    return all((folder / f["path"]).is_file() for f in manifest.files)


class Cache:
    """Folders of node results under the storage root: KEY/PORT (a dataset) and KEY/node.json."""

    def __init__(self, root: Path, staging: Path | None = None):
        self.root = root
        self.staging_root = staging or root / ".staging"

    def folder(self, node_key: str) -> Path:
        return self.root / node_key

    def lookup(self, node_key: str) -> dict | None:
        """Return the cached result {port: {...}} when every dataset output still exists and verifies."""
        marker = self.folder(node_key) / MARKER
        try:
            result = json.loads(marker.read_text())
        except (OSError, ValueError):
            return None
        for port, out in result.get("outputs", {}).items():
            if not out.get("ref"):  # files here (catalog entries are checked by the runner)
                folder = self.folder(node_key) / port
                if not intact(folder) or content(folder) != out["content"]:
                    return None
        return result

    def staging(self, node_key: str) -> Path:
        """Return an empty folder to write a node's result into before it is published."""
        tmp = self.staging_root / f"{node_key}-{os.getpid()}-{id(self)}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.root.mkdir(parents=True, exist_ok=True)
        return tmp

    def publish(self, node_key: str, staged: Path, result: dict[str, Any]) -> Path:
        """Move a staged result into place with its marker (replacing a damaged one)."""
        (staged / MARKER).write_text(json.dumps(result, sort_keys=True))
        final = self.folder(node_key)
        if final.exists():
            old = final.with_name(f".old-{node_key}-{os.getpid()}")
            final.rename(old)
            shutil.rmtree(old, ignore_errors=True)
        staged.rename(final)
        return final

    def remember(self, node_key: str, result: dict[str, Any]) -> None:
        """Record a result that has no files here (catalog entries): its marker only."""
        folder = self.staging(node_key)
        self.publish(node_key, folder, result)
