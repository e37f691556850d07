"""The structure view reads PyTorch files statically: torch's numbers, nothing run, bombs refused."""

from __future__ import annotations

import builtins
import importlib.util
import json
import os
import pickle
import pickletools
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kpl_lab.catalog import model_structure
from kpl_lab.catalog.model_structure import PICKLED_OBJECT, describe_model_files
from kpl_lab.testing.attacks import setstate_model

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "algorithms"

# torch.jit makes the archives under test; it warns that it is deprecated for new code
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


# --- real models: the static numbers are torch's ---------------------------------------------


def _example(relative: str):
    path = EXAMPLES / relative
    spec = importlib.util.spec_from_file_location(f"structure_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _models() -> dict:
    """Build the models lazily: importing the tests stays cheap."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, channels: int):
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)
            self.register_buffer("scale", torch.ones(channels))

        def forward(self, x):
            y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(x + y * self.scale.view(1, -1, 1, 1))

    class ResNetLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3)
            self.layers = nn.Sequential(Block(8), Block(8), nn.Conv2d(8, 16, 1))
            self.head = nn.Linear(16, 10)
            self.extra = nn.Parameter(torch.zeros(5))
            self.shared = self.head  # one module under two names

        def forward(self, x):
            return self.head(self.layers(self.stem(x)).mean((2, 3))) + self.extra.sum()

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(50, 8)
            self.decode = nn.Linear(8, 50, bias=False)
            self.decode.weight = self.embed.weight  # one parameter in two layers
            self.blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
            self.heads = nn.ModuleDict({"b": nn.Linear(8, 2), "a": nn.Linear(8, 3)})
            self.scales = nn.ParameterList([nn.Parameter(torch.zeros(i + 1)) for i in range(40)])

        def forward(self, x):
            h = self.embed(x)
            for block in self.blocks:
                h = block(h)
            return self.decode(h)

    classifier = _example("image-classification/classifier.py")
    detector = _example("detection/detector.py")
    segmenter = _example("segmentation/segmenter.py")
    return {
        "sequential": nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(16, 2)),
        "resnet-like": ResNetLike(),
        "tied": Tied(),
        "lstm": nn.LSTM(4, 8, num_layers=2, bidirectional=True),
        "transformer": nn.TransformerEncoder(
            nn.TransformerEncoderLayer(16, 4, 32), 2, enable_nested_tensor=False
        ),
        "example classifier": classifier.SmallCNN(10, 16),
        "example detector": detector.TinyCenterNet(3, 8),
        "example segmenter": segmenter.TinyUNet(3, 8),
    }


def _torch_view(path: Path) -> dict:
    """What the structure view showed when it loaded the archive with torch.jit.load."""
    import torch

    module = torch.jit.load(str(path), map_location="cpu")
    return {
        "parameters": sum(p.numel() for p in module.parameters()),
        "layers": [
            (name or "(root)", sub.original_name, sum(p.numel() for p in sub.parameters(recurse=False)))
            for name, sub in module.named_modules()
        ],
    }


def _static_view(entry: dict) -> dict:
    assert entry["format"] == "torchscript" and "error" not in entry, entry
    assert entry["layers_total"] == len(entry["layers"])
    return {
        "parameters": entry["parameters"],
        "layers": [(layer["name"], layer["type"], layer["parameters"]) for layer in entry["layers"]],
    }


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch.jit.script warns about nn.Transformer's fast path
def test_torchscript_numbers_are_torch_jit_loads(tmp_path):
    import torch

    files = []
    for name, model in _models().items():
        files.append(f"{name}.pt")
        torch.jit.script(model.eval()).save(str(tmp_path / files[-1]))
    traced = _models()["resnet-like"].eval()
    torch.jit.trace(traced, torch.zeros(1, 3, 8, 8)).save(str(tmp_path / "traced.pt"))
    files.append("traced.pt")
    for file, entry in zip(files, describe_model_files(tmp_path, files), strict=True):
        assert _static_view(entry) == _torch_view(tmp_path / file), file
    resnet = _static_view(describe_model_files(tmp_path, ["resnet-like.pt"])[0])
    assert resnet["layers"][:3] == [
        ("(root)", "ResNetLike", 5),
        ("stem", "Conv2d", 224),
        ("layers", "Sequential", 0),
    ]
    assert ("layers.0.bn1", "BatchNorm2d", 16) in resnet["layers"]  # weight and bias: not its 3 buffers


def _old_state_view(path: Path) -> dict:
    """The state dict's numbers as the structure view computed them with torch.load(weights_only=True)."""
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=True)
    tensors = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            tensors[str(key)] = value
        elif isinstance(value, dict):
            tensors |= {f"{key}.{k}": v for k, v in value.items() if isinstance(v, torch.Tensor)}
    return {
        "parameters": sum(t.numel() for t in tensors.values()),
        "shapes": {k: list(t.shape) for k, t in tensors.items()},
    }


def _new_state_view(entry: dict) -> dict:
    assert entry["format"] == "pytorch state dict", entry
    shapes = {}
    for layer in entry["layers"]:
        for kind, shape in layer["shapes"].items():
            shapes[kind if kind == layer["name"] else f"{layer['name']}.{kind}"] = shape
    return {"parameters": entry["parameters"], "shapes": shapes}


def test_state_dicts_and_checkpoints_match_torch_load(tmp_path):
    import torch

    models = _models()
    net = models["resnet-like"]
    torch.save(net.state_dict(), tmp_path / "zip.pt")
    torch.save(net.state_dict(), tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    # frames, STACK_GLOBAL and MEMOIZE: torch.load(weights_only=True) does not read these at all
    torch.save(net.state_dict(), tmp_path / "protocol5.pt", pickle_protocol=5)
    classifier = models["example classifier"]
    optimizer = torch.optim.Adam(classifier.parameters())
    classifier(torch.zeros(2, 1, 16, 16)).sum().backward()
    optimizer.step()  # its state now holds tensors, one level deeper than the view reads
    checkpoint = {  # as the examples' train.py saves
        "model": classifier.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 1,
        "class_names": [str(i) for i in range(10)],
        "image_size": 16,
        "labels": {"cat", "dog"},  # a set: allowed by weights_only, pickled as __builtin__.set
    }
    torch.save(checkpoint, tmp_path / "checkpoint.pth")
    base = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)
    torch.save(
        {
            "uint16": torch.zeros(3, dtype=torch.uint16),
            "column": base[:, 1],  # a view: shares its storage, offset 1, stride 6
            "float8": torch.zeros(2, 2, dtype=torch.float8_e4m3fn),
            "scalar": torch.tensor(3),
            "empty": torch.zeros(0, 5),
        },
        tmp_path / "dtypes.bin",
    )
    files = ["zip.pt", "legacy.pt", "checkpoint.pth", "dtypes.bin", "protocol5.pt"]
    for file, entry in zip(files, describe_model_files(tmp_path, files), strict=True):
        reference = "zip.pt" if file == "protocol5.pt" else file
        assert _new_state_view(entry) == _old_state_view(tmp_path / reference), file
    [checkpoint_entry] = describe_model_files(tmp_path, ["checkpoint.pth"])
    assert checkpoint_entry["layers"][0]["name"] == "model.features.0"


def test_the_structure_view_imports_nothing_while_reading(tmp_path):
    """No torch in the process, and no import at all while the files are read."""
    import torch

    sequential = _models()["sequential"]
    torch.jit.script(sequential).save(str(tmp_path / "scripted.pt"))
    torch.save(sequential.state_dict(), tmp_path / "weights.pt")
    torch.save(sequential, tmp_path / "full.pt")
    script = (
        "import builtins, json, sys\n"
        "from pathlib import Path\n"
        "from kpl_lab.catalog.model_structure import describe_model_files\n"
        "imported = []\n"
        "real = builtins.__import__\n"
        "def recording(name, *args, **kwargs):\n"
        "    imported.append(name)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = recording\n"
        "entries = describe_model_files(Path(sys.argv[1]), ['scripted.pt', 'weights.pt', 'full.pt'])\n"
        "builtins.__import__ = real\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, 'imported': imported, 'entries': entries}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout)
    assert result["torch"] is False and result["imported"] == []
    scripted, weights, full = result["entries"]
    assert scripted["format"] == "torchscript" and scripted["parameters"] == 4 * 3 * 9 + 4 + 8 + 34
    assert weights["format"] == "pytorch state dict"
    assert weights["parameters"] == scripted["parameters"] + 4 + 4 + 1  # and BatchNorm's buffers
    assert full["error"] == PICKLED_OBJECT


# --- hostile files: nothing runs --------------------------------------------------------------


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _global(qualname: str) -> bytes:
    module, name = qualname.rsplit(".", 1)
    return b"c" + f"{module}\n{name}\n".encode()


def _call(qualname: str, *args: bytes) -> bytes:
    return _global(qualname) + b"(" + b"".join(args) + b"tR"


def _with_data_pkl(source: Path, target: Path, data: bytes) -> None:
    """Copy a torch archive with its data.pkl replaced."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            content = data if info.filename.endswith("/data.pkl") else old.read(info)
            new.writestr(info.filename, content)


def _archive(target: Path, data: bytes, code: str | None = None) -> None:
    """Write a torch-style zip: archive/data.pkl, with a code/ file when it is TorchScript."""
    with zipfile.ZipFile(target, "w") as archive:
        archive.writestr("archive/data.pkl", data)
        archive.writestr("archive/version", "3\n")
        if code is not None:
            archive.writestr("archive/code/__torch__.py", code)


def test_a_torchscript_setstate_is_never_run(tmp_path):
    import torch

    marker = tmp_path / "written-by-the-model"
    setstate_model(str(marker)).save(str(tmp_path / "evil.pt"))
    torch.jit.load(str(tmp_path / "evil.pt"))  # the archive is live: torch runs its __setstate__
    assert marker.read_bytes() == b"A" * 8
    marker.unlink()
    [entry] = describe_model_files(tmp_path, ["evil.pt"])
    assert not marker.exists()
    assert entry["format"] == "torchscript" and entry["layers"] == [
        {"name": "(root)", "type": "Evil", "parameters": 0}
    ]
    assert [name.rsplit(".", 2)[-2:] for name in entry["not_run"]] == [["Evil", "__setstate__"]]


def test_globals_a_pickle_asks_to_call_are_never_called(tmp_path, monkeypatch):
    import torch

    system_marker, eval_marker = tmp_path / "by-system", tmp_path / "by-eval"
    calls = (
        _text("system")
        + _call("os.system", _text(f"touch {system_marker}"))
        + _text("eval")
        + _call("builtins.eval", _text(f"open({str(eval_marker)!r}, 'w').close()"))
        + _text("from_file")
        + _call("torch.from_file", _text(str(tmp_path / "by-from-file")), b"\x88K\x08")
    )
    payload = b"\x80\x02}(" + calls + b"u."
    markers = [system_marker, eval_marker, tmp_path / "by-from-file"]
    pickle.loads(payload)
    assert all(marker.exists() for marker in markers)  # the payload is live for a plain unpickler
    for marker in markers:
        marker.unlink()

    called = []
    monkeypatch.setattr(os, "system", lambda *args: called.append("os.system"))
    monkeypatch.setattr(builtins, "eval", lambda *args: called.append("eval"))
    monkeypatch.setattr(torch, "from_file", lambda *args, **kwargs: called.append("from_file"))
    torch.jit.script(torch.nn.Sequential(torch.nn.Linear(2, 2))).save(str(tmp_path / "real.pt"))
    with zipfile.ZipFile(tmp_path / "real.pt") as real:  # its class, mangled if this process scripted others
        root = next(pickletools.genops(real.read("real/data.pkl")[2:]))[1].replace(" ", ".")
    scripted = b"\x80\x02" + _global(root) + b")\x81}(" + _text("training") + b"\x88" + calls + b"ub."
    _with_data_pkl(tmp_path / "real.pt", tmp_path / "scripted.pt", scripted)
    _archive(tmp_path / "checkpoint.pt", payload)
    scripted_entry, checkpoint_entry = describe_model_files(tmp_path, ["scripted.pt", "checkpoint.pt"])
    assert called == [] and not any(marker.exists() for marker in markers)
    assert scripted_entry.get("layers") == [{"name": "(root)", "type": "Sequential", "parameters": 0}], (
        scripted_entry
    )
    assert scripted_entry["not_run"] == ["builtins.eval", "os.system", "torch.from_file"]
    assert checkpoint_entry == {
        "path": "checkpoint.pt",
        "size_bytes": (tmp_path / "checkpoint.pt").stat().st_size,
        "format": "pytorch",
        "error": PICKLED_OBJECT,
        "classes": ["builtins.eval", "os.system", "torch.from_file"],
    }


def test_a_full_model_pickle_is_listed_with_its_classes_not_loaded(tmp_path):
    import torch

    torch.save({"model": _models()["sequential"]}, tmp_path / "pickled.pth")
    [entry] = describe_model_files(tmp_path, ["pickled.pth"])
    assert entry["error"] == PICKLED_OBJECT
    assert {
        "torch.nn.modules.container.Sequential",
        "torch.nn.modules.conv.Conv2d",
        "torch.nn.modules.linear.Linear",
    } <= set(entry["classes"])


# --- bounded work: crafted pickles refused with a clear error --------------------------------


def _laughs(levels: int, fan: int) -> bytes:
    """Lists of `fan` references to the list before: fan**levels values as a tree, a few bytes each."""
    out = b"\x80\x02]q\x00"
    for level in range(1, levels):
        out += b"](" + (b"h" + bytes([level - 1])) * fan + b"eq" + bytes([level]) + b"0"
    return out + b"h" + bytes([levels - 1]) + b"."


def _module_laughs(levels: int, fan: int) -> bytes:
    """TorchScript modules each holding `fan` references to the one below: fan**levels layers."""
    module = _global("__torch__.M") + b")\x81"
    out = b"\x80\x02" + module + b"}bq\x00" + b"0"
    for level in range(1, levels):
        children = b"".join(_text(str(i)) + b"h" + bytes([level - 1]) for i in range(fan))
        out += module + b"}(" + children + b"ubq" + bytes([level]) + b"0"
    return out + b"h" + bytes([levels - 1]) + b"."


def _colliding_keys(count: int) -> bytes:
    """A dict whose int keys all hash alike (multiples of 2**61 - 1): quadratic to insert."""
    keys = b""
    for i in range(1, count + 1):
        data = (i * (2**61 - 1)).to_bytes(16, "little", signed=True)
        keys += b"\x8a" + bytes([len(data)]) + data + b"N"
    return b"\x80\x02}(" + keys + b"u."


BOMBS = {
    "laughs": (_laughs(12, 10), "expand to more than 10,000,000 values"),
    "huge LONG4": (b"\x80\x02\x8b" + struct.pack("<i", 100_000) + b"\x01" * 100_000 + b".", "an integer of"),
    "huge text LONG": (b"L" + b"9" * 5000 + b"L\n.", "an integer of 5,000 digits"),
    "nested tuples": (b"\x80\x02N" + b"\x85" * 5000 + b".", "nested more than 1,000 deep"),
    "open MARKs": (b"\x80\x02" + b"(" * 5000 + b"N.", "more than 1,000 MARKs open"),
    "memo index": (b"\x80\x02Nr\xff\xff\xff\x7f.", "memo index 2,147,483,647"),
    "colliding keys": (_colliding_keys(2_500), "more than 2,000 dict or set keys"),
    "extension code": (b"\x80\x02\x82\x01.", "EXT1"),
    "truncated": (b"\x80\x02X\xff\xff\x00\x00abc", "ends inside"),
    "no STOP": (b"\x80\x02N", "ends before its STOP"),
}


def test_crafted_pickles_are_refused_with_a_clear_error(tmp_path):
    for name, (data, _) in BOMBS.items():
        _archive(tmp_path / f"{name}.pt", data)
    _archive(tmp_path / "modules.pt", _module_laughs(20, 2), code="class M(Module):\n  __parameters__ = []\n")
    files = [f"{name}.pt" for name in BOMBS] + ["modules.pt"]
    entries = describe_model_files(tmp_path, files)  # never raises
    for (name, (_, message)), entry in zip(BOMBS.items(), entries, strict=False):
        assert entry["format"] == "pytorch" and message in entry["error"], (name, entry)
        assert entry["error"].startswith("data.pkl: "), entry
    assert entries[-1]["format"] == "torchscript"
    assert entries[-1]["error"] == "more than 100,000 layers (submodules repeated or nested in a loop)"


def test_a_pickle_of_too_many_opcodes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(model_structure, "MAX_OPCODES", 1_000)
    _archive(tmp_path / "under.pt", b"\x80\x02" + b"N0" * 498 + b"}.")  # 998 opcodes
    _archive(tmp_path / "over.pt", b"\x80\x02" + b"N0" * 499 + b"}.")
    under, over = describe_model_files(tmp_path, ["under.pt", "over.pt"])
    assert under["error"] == "no tensors found in the file"
    assert over["error"] == "data.pkl: more than 1,000 pickle opcodes"


def test_a_zip_whose_directory_is_too_big_is_refused_before_zipfile_lists_it(tmp_path, monkeypatch):
    import torch

    torch.save({"weight": torch.zeros(2)}, tmp_path / "small.pt")
    with zipfile.ZipFile(tmp_path / "many.pt", "w") as archive:
        for i in range(100):
            archive.writestr(f"archive/data/{i}", b"")
    monkeypatch.setattr(model_structure, "MAX_ZIP_DIRECTORY", 2_000)
    small, many = describe_model_files(tmp_path, ["small.pt", "many.pt"])
    assert small["parameters"] == 2
    assert many["error"] == "a zip directory of 6,090 bytes (at most 2,000)"


def test_a_storage_that_does_not_match_its_record_is_refused(tmp_path):
    import torch

    torch.save({"weight": torch.zeros(4, 4)}, tmp_path / "whole.pt")
    with zipfile.ZipFile(tmp_path / "whole.pt") as whole:
        names = whole.namelist()
        with (
            zipfile.ZipFile(tmp_path / "short.pt", "w") as short,
            zipfile.ZipFile(tmp_path / "gone.pt", "w") as gone,
        ):
            for name in names:
                content = whole.read(name)
                short.writestr(name, content[:10] if name.endswith("/data/0") else content)
                if not name.endswith("/data/0"):
                    gone.writestr(name, content)
    short, gone = describe_model_files(tmp_path, ["short.pt", "gone.pt"])
    assert short["error"] == "data.pkl: tensor storage '0' holds 10 bytes, its record says 64"
    assert gone["error"] == "data.pkl: tensor storage '0' is missing from the archive"


def test_files_that_are_not_pytorch_or_onnx_give_an_error_entry(tmp_path, monkeypatch):
    (tmp_path / "random.bin").write_bytes(bytes(range(256)) * 16)
    (tmp_path / "plain.pt").write_bytes(pickle.dumps({"a": 1}))
    (tmp_path / "corrupt.onnx").write_bytes(b"this is not an ONNX graph\n" * 8)
    (tmp_path / "not-a-zip.pt").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    random, plain, corrupt, not_zip = describe_model_files(
        tmp_path, ["random.bin", "plain.pt", "corrupt.onnx", "not-a-zip.pt"]
    )
    not_torch = "not a PyTorch file: neither a zip archive nor torch.save's legacy format"
    assert random["error"] == not_torch and plain["error"] == not_torch and not_zip["error"] == not_torch
    assert corrupt["format"] == "onnx" and corrupt["error"].startswith("cannot read the ONNX graph")
    monkeypatch.setattr(model_structure, "MAX_ONNX_BYTES", 100)
    [big] = describe_model_files(tmp_path, ["corrupt.onnx"])
    assert big["error"] == (
        "ONNX file of 208 bytes is over protobuf's limit of 100: save its weights as external data"
    )


def test_an_onnx_node_without_name_or_outputs_is_described(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["y"], [])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    onnx.save(helper.make_model(graph), str(tmp_path / "odd.onnx"))
    [entry] = describe_model_files(tmp_path, ["odd.onnx"])
    assert [layer["name"] for layer in entry["layers"]] == ["y", "Identity"]


def test_a_numpy_archive_is_described_from_its_array_headers(tmp_path):
    import numpy as np

    weights = {
        "hidden.weight": np.zeros((128, 256), np.float32),
        "hidden.bias": np.zeros(128, np.float32),
        "output.weight": np.zeros((10, 128), np.float32),
        "output.bias": np.zeros(10, np.float32),
    }
    np.savez(tmp_path / "model.npz", **weights)  # what the demo's mlp-classification writes
    np.savez(tmp_path / "objects.npz", things=np.array([{"a": 1}], dtype=object))
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    model, objects, broken = describe_model_files(tmp_path, ["model.npz", "objects.npz", "broken.npz"])
    assert model["format"] == "numpy arrays" and model["parameters"] == 128 * 256 + 128 + 10 * 128 + 10
    assert [(layer["name"], layer["type"], layer["shapes"]) for layer in model["layers"]] == [
        ("hidden", "Linear 256->128", {"weight": [128, 256], "bias": [128]}),
        ("output", "Linear 128->10", {"weight": [10, 128], "bias": [10]}),
    ]
    assert objects == {
        "path": "objects.npz",
        "size_bytes": objects["size_bytes"],
        "format": "numpy",
        "error": "things.npy holds Python objects (a pickle): not read",
    }
    assert broken["format"] == "numpy" and broken["error"].startswith("cannot read the file")
