"""Algorithm packages: safe extraction, content hash, immutable versions."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from kpl_lab.algorithms.errors import AlgorithmError, ArchiveError
from kpl_lab.algorithms.package import (
    ArchiveLimits,
    content_hash,
    extract_archive,
    install_algorithm,
    read_algorithm,
    remove_version,
)

ENVIRONMENT = "train:\n  inputs:\n    - key: data\n  cmd: python3 train.py\n"
PARAMETERS = "lr: 0.01\nepochs: 2\n"


def make_algorithm(folder: Path, extra: dict[str, bytes] | None = None) -> Path:
    folder.mkdir(parents=True)
    files = {
        "environment.yml": ENVIRONMENT.encode(),
        "parameter.yml": PARAMETERS.encode(),
        "train.py": b"print(1)\n",
    }
    files.update(extra or {})
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return folder


def zip_of(path: Path, entries: dict[str, bytes], prefix: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(prefix + name, data)
    return path


def tar_add(
    tf: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""
) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.linkname = link
    info.mode = 0o644
    tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


BASE = {"environment.yml": ENVIRONMENT.encode(), "train.py": b"print(1)\n"}


def test_read_algorithm_validates_and_hashes(tmp_path):
    algorithm = read_algorithm(make_algorithm(tmp_path / "cls"))
    assert algorithm.name == "cls" and len(algorithm.version) == 12
    assert algorithm.digest.startswith(algorithm.version) and algorithm.ref == f"cls:{algorithm.version}"
    assert list(algorithm.spec.functions) == ["train"]
    assert algorithm.parameters.values == {"lr": 0.01, "epochs": 2}
    assert algorithm.size_bytes == len(ENVIRONMENT) + len(PARAMETERS) + len(b"print(1)\n")


def test_hash_is_stable_and_ignores_caches(tmp_path):
    a = make_algorithm(tmp_path / "a", {"pkg/model.py": b"x = 1\n"})
    b = make_algorithm(tmp_path / "b", {"pkg/model.py": b"x = 1\n"})
    for junk in ("__pycache__/m.pyc", ".git/HEAD", ".ipynb_checkpoints/t.py", "pkg/__pycache__/x.pyc"):
        (b / junk).parent.mkdir(parents=True, exist_ok=True)
        (b / junk).write_bytes(b"junk")
    os.utime(b / "train.py", (1, 1))
    assert content_hash(a) == content_hash(b)
    (b / "pkg/model.py").write_bytes(b"x = 2\n")
    assert content_hash(a)[0] != content_hash(b)[0]
    (b / "pkg/model.py").rename(b / "pkg/other.py")
    (b / "pkg/other.py").write_bytes(b"x = 1\n")
    assert content_hash(a)[0] != content_hash(b)[0]


def test_all_problems_of_both_files_are_reported(tmp_path):
    folder = make_algorithm(
        tmp_path / "bad", {"environment.yml": b"train:\n  cad: x\n", "parameter.yml": b"- 1\n"}
    )
    with pytest.raises(AlgorithmError) as info:
        read_algorithm(folder)
    assert [str(p) for p in info.value.problems] == [
        "train.cmd: missing; the command that starts this function is required (environment.yml:1)",
        'train.cad: unknown field; did you mean "cmd"? (environment.yml:2)',
        "expected a mapping of parameter names to values, got [1] (parameter.yml:1)",
    ]


def test_missing_environment_names_what_was_found(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "train.py").write_text("")
    with pytest.raises(
        AlgorithmError, match=r"no environment.yml at the top of the algorithm \(found: train.py\)"
    ):
        read_algorithm(tmp_path / "x")


def test_install_folder_is_immutable_and_idempotent(tmp_path):
    source = make_algorithm(tmp_path / "src" / "cls", {"__pycache__/a.pyc": b"junk"})
    store = tmp_path / "store"
    first = install_algorithm(source, store)
    assert first.path == store / "cls" / first.version
    assert sorted(p.name for p in first.path.iterdir()) == ["environment.yml", "parameter.yml", "train.py"]
    assert not os.stat(first.path / "train.py").st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    again = install_algorithm(source, store)
    assert again.path == first.path and again.version == first.version
    (source / "train.py").write_text("print(2)\n")
    changed = install_algorithm(source, store, name="renamed")
    assert changed.version != first.version and changed.path.parent.name == "renamed"
    assert list((store / ".staging").iterdir()) == []
    remove_version(first.path)
    assert not first.path.exists()


def test_install_zip_and_tar_give_the_same_version(tmp_path):
    store = tmp_path / "store"
    folder = install_algorithm(make_algorithm(tmp_path / "algo"), store)
    archive = zip_of(
        tmp_path / "algo.zip",
        {
            name: (folder.path / name).read_bytes()
            for name in ("environment.yml", "parameter.yml", "train.py")
        },
        prefix="algo/",
    )
    from_zip = install_algorithm(archive, store)
    assert (from_zip.name, from_zip.version) == ("algo", folder.version)
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tf:
        for name in ("environment.yml", "parameter.yml", "train.py"):
            tar_add(tf, name, (folder.path / name).read_bytes())
    from_tar = install_algorithm(tmp_path / "other.tar.gz", store)
    assert (from_tar.name, from_tar.version) == ("other", folder.version)


def test_invalid_upload_leaves_nothing(tmp_path):
    store = tmp_path / "store"
    archive = zip_of(tmp_path / "bad.zip", {"environment.yml": b"train: {}\n"})
    with pytest.raises(AlgorithmError, match="train.cmd: missing"):
        install_algorithm(archive, store)
    assert [p.name for p in store.iterdir()] == [".staging"] and list((store / ".staging").iterdir()) == []


def test_not_an_archive(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(AlgorithmError, match="notes.txt: expected a folder or an archive"):
        install_algorithm(tmp_path / "notes.txt", tmp_path / "store")
    (tmp_path / "fake.zip").write_text("not a zip")
    with pytest.raises(ArchiveError, match="fake.zip: not a zip or tar archive"):
        install_algorithm(tmp_path / "fake.zip", tmp_path / "store")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("../evil.py", r"\.\./evil.py: '\.\.' in a path would write outside the algorithm folder"),
        ("a/../../evil.py", r"'\.\.' in a path"),
        ("/etc/evil", r"/etc/evil: absolute paths are not accepted"),
        ("C:\\evil", r"absolute paths are not accepted"),
        ("..\\evil.py", r"'\.\.' in a path"),
    ],
)
def test_zip_path_traversal_is_refused(tmp_path, entry, message):
    archive = zip_of(tmp_path / "a.zip", {**BASE, entry: b"x"})
    with pytest.raises(ArchiveError, match=message):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "evil.py").exists()


def test_zip_symlink_is_refused(tmp_path):
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("data")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(ArchiveError, match="data: symbolic links are not accepted"):
        extract_archive(archive, tmp_path / "out")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (tarfile.SYMTYPE, "data: links are not accepted"),
        (tarfile.LNKTYPE, "data: links are not accepted"),
        (tarfile.CHRTYPE, "data: device and special files are not accepted"),
        (tarfile.FIFOTYPE, "data: device and special files are not accepted"),
    ],
)
def test_tar_links_and_devices_are_refused(tmp_path, kind, message):
    with tarfile.open(tmp_path / "a.tar", "w") as tf:
        tar_add(tf, "environment.yml", BASE["environment.yml"])
        tar_add(tf, "data", kind=kind, link="/etc/passwd")
    with pytest.raises(ArchiveError, match=message):
        extract_archive(tmp_path / "a.tar", tmp_path / "out")


def test_tar_traversal_is_refused(tmp_path):
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tf:
        tar_add(tf, "../../evil", b"x")
    with pytest.raises(ArchiveError, match=r"\.\./\.\./evil: '\.\.' in a path"):
        extract_archive(tmp_path / "a.tgz", tmp_path / "out")


def test_zip_bomb_ratio_is_refused(tmp_path):
    archive = zip_of(tmp_path / "bomb.zip", {**BASE, "zeros.bin": bytes(20 * 1024 * 1024)})
    with pytest.raises(
        ArchiveError, match=r"zeros.bin: entry expands more than 100 times its size \(zip bomb\?\)"
    ):
        extract_archive(archive, tmp_path / "out")


def test_tar_gz_bomb_is_stopped_while_extracting(tmp_path):
    with tarfile.open(tmp_path / "bomb.tar.gz", "w:gz") as tf:
        tar_add(tf, "zeros.bin", bytes(20 * 1024 * 1024))
    with pytest.raises(ArchiveError, match=r"zeros.bin: the archive expands more than 100 times its size"):
        extract_archive(tmp_path / "bomb.tar.gz", tmp_path / "out")


def test_size_and_count_limits(tmp_path):
    archive = zip_of(tmp_path / "big.zip", {"a.bin": os.urandom(3000), "b.bin": os.urandom(3000)})
    with pytest.raises(ArchiveError, match="the archive expands beyond 5000 bytes"):
        extract_archive(archive, tmp_path / "out1", ArchiveLimits(max_total_bytes=5000))
    with pytest.raises(ArchiveError, match="b.bin: more than 1 files in the archive"):
        extract_archive(archive, tmp_path / "out2", ArchiveLimits(max_files=1))


def test_duplicate_entries_are_refused(tmp_path):
    archive = tmp_path / "dup.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.py", "1")
        with pytest.warns(UserWarning, match="Duplicate name"):
            zf.writestr("a.py", "2")
    with pytest.raises(ArchiveError, match="a.py: duplicate entry in the archive"):
        extract_archive(archive, tmp_path / "out")


def test_folder_with_symlink_is_refused(tmp_path):
    folder = make_algorithm(tmp_path / "algo")
    (folder / "link").symlink_to("/etc/passwd")
    with pytest.raises(ArchiveError, match="link: symbolic links are not accepted in an algorithm"):
        install_algorithm(folder, tmp_path / "store")


def test_unicode_names_and_executable_bit_survive(tmp_path):
    archive = tmp_path / "u.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in BASE.items():
            zf.writestr(name, data)
        info = zipfile.ZipInfo("脚本/run.sh")
        info.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(info, "#!/bin/sh\n")
    algorithm = install_algorithm(archive, tmp_path / "store", name="suanfa")
    script = algorithm.path / "脚本" / "run.sh"
    assert algorithm.name == "suanfa" and os.access(script, os.X_OK)


def test_an_algorithm_is_named_as_the_catalog_names_things(tmp_path):
    archive = tmp_path / "u.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in BASE.items():
            zf.writestr(name, data)
    with pytest.raises(AlgorithmError, match="'算法' is not a valid algorithm name: use 1-100 ASCII letters"):
        install_algorithm(archive, tmp_path / "store", name="算法")
    assert not (tmp_path / "store" / "算法").exists()
