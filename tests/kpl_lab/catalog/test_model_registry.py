"""The model registry: aliases, archive uploads with hostile-upload checks, the structure view."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile

import pytest

from kpl_lab.catalog.model_structure import describe_model_files
from kpl_lab.cli import main
from kpl_lab.errors import BadRequest, NotFound

pytestmark = pytest.mark.databases


def add(platform, tmp_path, name, content: bytes):
    path = tmp_path / f"{name}-{len(content)}.bin"
    path.write_bytes(content)
    return platform.catalog.add_model("p", name, path)


def test_alias_resolves_moves_and_goes_with_its_version(platform, tmp_path):
    first = add(platform, tmp_path, "net", b"one")
    second = add(platform, tmp_path, "net", b"two!")
    catalog = platform.catalog
    catalog.set_model_alias("p", f"net:{first.version}", "production")
    catalog.set_model_alias("p", "net", "canary")  # the latest
    assert catalog.get_model("p", "net@production").id == first.id
    assert catalog.get_model("p", "net@canary").id == second.id
    kind, row, _ = catalog.resolve_input("p", "net@production")
    assert (kind, row.id) == ("model", first.id)
    assert catalog.resolve_input("p", "model:net@canary")[1].id == second.id
    [model] = catalog.list_models("p")
    assert {a.alias: a.model_version.version for a in model.aliases} == {
        "production": first.version,
        "canary": second.version,
    }
    catalog.set_model_alias("p", f"net:{second.version}", "production")  # promote: the alias moves
    assert catalog.get_model("p", "net@production").id == second.id
    assert catalog.model_aliases(second) == ["canary", "production"]
    with pytest.raises(NotFound, match=r"net@best not found \(aliases: canary, production\)"):
        catalog.get_model("p", "net@best")
    with pytest.raises(BadRequest, match="alias"):
        catalog.set_model_alias("p", "net", "../x")
    assert catalog.remove_model_alias("p", "net", "canary") == second.ref
    catalog.delete_model("p", second.ref)
    with pytest.raises(NotFound):  # its alias went with it
        catalog.get_model("p", "net@production")
    with pytest.raises(NotFound):  # aliases are per project
        platform.catalog.get_model("other", "net@production")


def test_archive_upload_unpacks_a_folder(platform, tmp_path):
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("net/weights.bin", b"w" * 100), ("net/config.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    row = platform.catalog.add_model("p", "packed", archive)
    assert sorted(row.files) == ["config.json", "weights.bin"]
    assert (platform.catalog.path(row) / "weights.bin").read_bytes() == b"w" * 100


def _tar_with(tmp_path, info: tarfile.TarInfo, data: bytes = b"") -> str:
    archive = tmp_path / "bad.tar"
    with tarfile.open(archive, "w") as tar:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return archive


def test_hostile_archives_are_refused_and_leave_nothing(platform, tmp_path):
    traversal = _tar_with(tmp_path, tarfile.TarInfo("../../escape.bin"), b"x")
    with pytest.raises(BadRequest, match=r"'\.\.'"):
        platform.catalog.add_model("p", "bad", traversal)
    link = tarfile.TarInfo("passwd")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    with pytest.raises(BadRequest, match="link"):
        platform.catalog.add_model("p", "bad", _tar_with(tmp_path, link))
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * (64 * 1024 * 1024))
    with pytest.raises(BadRequest, match="zip bomb"):
        platform.catalog.add_model("p", "bad", bomb)
    assert platform.catalog.list_models("p") == []
    assert not (tmp_path / "escape.bin").exists()
    assert not any((platform.storage.project_dir("p") / ".staging").iterdir())


class _Net:
    """A tiny convolutional classifier, built lazily so that importing the tests stays cheap."""

    @staticmethod
    def make():
        import torch

        torch.manual_seed(0)
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 4, 3),
            torch.nn.ReLU(),
            torch.nn.Flatten(),
            torch.nn.Linear(4 * 6 * 6, 10),
        ).eval()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch's legacy ONNX exporter warns
def test_structure_of_onnx_state_dict_torchscript_and_other_files(tmp_path):
    import torch

    net = _Net.make()
    x = torch.zeros(1, 1, 8, 8)
    torch.onnx.export(
        net,
        x,
        tmp_path / "net.onnx",
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}},
        dynamo=False,
    )
    torch.save(net.state_dict(), tmp_path / "weights.pt")
    torch.jit.trace(net, x).save(str(tmp_path / "scripted.pt"))
    torch.save({"model": net}, tmp_path / "pickled.pth")  # a full pickle: must not be unpickled
    (tmp_path / "notes.txt").write_text("hello")
    expected = 4 * 1 * 3 * 3 + 4 + 4 * 6 * 6 * 10 + 10
    files = ["net.onnx", "weights.pt", "scripted.pt", "pickled.pth", "notes.txt"]
    onnx_file, state, scripted, pickled, notes = describe_model_files(tmp_path, files)
    assert onnx_file["format"] == "onnx" and onnx_file["parameters"] == expected
    assert onnx_file["inputs"] == [{"name": "image", "shape": ["batch", 1, 8, 8], "dtype": "float"}]
    assert onnx_file["outputs"][0]["name"] == "logits" and onnx_file["outputs"][0]["shape"][1] == 10
    assert onnx_file["op_counts"]["Conv"] == 1 and onnx_file["op_counts"]["Gemm"] == 1
    assert sum(layer["parameters"] for layer in onnx_file["layers"]) == expected
    assert state["format"] == "pytorch state dict" and state["parameters"] == expected
    assert [(layer["name"], layer["type"]) for layer in state["layers"]] == [
        ("0", "Conv2d 1->4 3x3"),
        ("3", "Linear 144->10"),
    ]
    assert scripted["format"] == "torchscript" and scripted["parameters"] == expected
    assert pickled["error"] == "a pickled Python object: not read (it would run code)"
    assert "torch.nn.modules.container.Sequential" in pickled["classes"]
    assert notes == {"path": "notes.txt", "size_bytes": 5, "format": "file"}


def test_cli_alias_and_structure(tmp_path, capsys):
    import torch

    folder = tmp_path / "m"
    folder.mkdir()
    torch.save(_Net.make().state_dict(), folder / "weights.pt")
    home = ["--home", str(tmp_path / "home")]
    assert main([*home, "model", "add", "net", str(folder), "--json"]) == 0
    version = json.loads(capsys.readouterr().out)["version"]
    assert main([*home, "model", "alias", "net", "production"]) == 0
    assert capsys.readouterr().out.strip() == f"model net@production -> net:{version}"
    assert main([*home, "model", "show", "net@production", "--structure"]) == 0
    out = capsys.readouterr().out
    assert "parameters: 1,490" in out and "Linear 144->10" in out
    assert main([*home, "model", "show", "net@production", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["aliases"] == ["production"]
    assert main([*home, "model", "unalias", "net", "production"]) == 0
    assert main([*home, "model", "show", "net@production"]) == 2
