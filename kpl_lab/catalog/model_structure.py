"""The structure view of a model version: layers or ops, parameter counts and shapes of its files.

Every file is read statically: nothing in it runs and no tensor data is loaded. ONNX files are
parsed with the `onnx` package (a protobuf parser: graph only). PyTorch files (TorchScript
archives, and state dicts or checkpoints written by `torch.save`) are read without torch by a
restricted unpickler: every class the pickle names becomes an inert stand-in that only records
what the file hands it, and tensors become records of their shape. A pickle is checked opcode by
opcode before it is read, so a crafted one is refused (opcodes, memo, nesting, references that
expand, big ints, keys whose hashes collide) instead of eating the service's memory or time. A
file that pickles Python objects other than tensors (a full model saved with `torch.save(model)`)
is listed with its class names, never loaded.
"""

from __future__ import annotations

import io
import pickle
import pickletools
import re
import tarfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from math import prod
from pathlib import Path

ONNX_SUFFIXES = (".onnx",)
TORCH_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin")
NUMPY_SUFFIXES = (".npz",)  # np.savez: arrays by name (the demo's mlp-classification)
MAX_NPY_HEADER = 10_000  # numpy's own default bound on an array's header
MAX_LAYERS = 500  # a structure view is for reading: very deep graphs are cut

# Bounds on what one file may make the reader do; a file past any of them is refused.
MAX_ONNX_BYTES = 2 << 30  # protobuf's own limit: bigger models keep their weights as external data
MAX_PICKLE_BYTES = 64 << 20  # data.pkl holds structure only: tensor data are entries of their own
MAX_ZIP_DIRECTORY = 4 << 20  # zipfile keeps an object per entry: tens of thousands of tensors fit
MAX_CODE_BYTES = 16 << 20  # TorchScript code files, all together, read for their parameter names
MAX_OPCODES = 2_000_000
MAX_MEMO = 1_000_000  # the unpickler allocates memo slots up to the highest index it is given
MAX_NESTING = 1_000  # containers in containers, and MARKs open at once
MAX_EXPANDED = 10_000_000  # values a pickle holds counted as a tree: a "billion laughs" of references
MAX_INT_BITS = 256  # ints in a model file are shapes, offsets and counts
MAX_CLASSES = 10_000  # distinct class names in one pickle
MAX_ODD_KEYS = 2_000  # dict and set keys other than str, bytes and small ints: hashes one can collide
MAX_MODULES = 100_000  # layers walked in a TorchScript archive (a shared submodule counts each time)

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of torch.save's format before torch 1.6
LEGACY_PROTOCOL = 1001
PICKLED_OBJECT = "a pickled Python object: not read (it would run code)"

DTYPE_SIZES = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1, "complex128": 16,
    "complex64": 8, "complex32": 4, "qint8": 1, "qint32": 4, "quint8": 1, "quint4x2": 1,
    "quint2x4": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "bits1x8": 1, "bits2x4": 1, "bits4x2": 1,
    "bits8": 1, "bits16": 2,
}  # fmt: skip
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
    "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8",
    "QInt32Storage": "qint32", "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4", "UntypedStorage": "uint8",
}  # fmt: skip


def describe_model_files(folder: str | Path, files: list[str]) -> list[dict]:
    """Return one entry per file: path, size and, for ONNX and PyTorch files, their structure."""
    folder = Path(folder)
    described = []
    for name in files:
        path = folder / name
        entry: dict = {"path": name, "size_bytes": path.stat().st_size, "format": "file"}
        lower = name.lower()
        try:
            if lower.endswith(ONNX_SUFFIXES):
                entry |= _describe_onnx(path, entry["size_bytes"])
            elif lower.endswith(TORCH_SUFFIXES):
                entry |= _describe_torch(path)
            elif lower.endswith(NUMPY_SUFFIXES):
                entry |= _describe_npz(path)
        except Exception as exc:  # one unreadable upload is described, the others still are
            entry["error"] = f"cannot read {name}: {type(exc).__name__}: {exc}"
        described.append(entry)
    return described


def _shape(dims) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]


def _describe_onnx(path: Path, size: int) -> dict:
    if size > MAX_ONNX_BYTES:
        return {
            "format": "onnx",
            "error": f"ONNX file of {size:,} bytes is over protobuf's limit of {MAX_ONNX_BYTES:,}: "
            "save its weights as external data",
        }
    try:
        import onnx
    except ImportError:
        return {"error": "install the onnx package to see the structure of ONNX files"}
    try:
        model = onnx.load(str(path), load_external_data=False)
        return _onnx_structure(onnx, model)
    except Exception as exc:  # a corrupt upload is described, not raised
        return {"format": "onnx", "error": f"cannot read the ONNX graph: {exc}"}


def _onnx_structure(onnx, model) -> dict:
    graph = model.graph
    sizes = {t.name: prod(t.dims) for t in graph.initializer}
    initializers = set(sizes)

    def tensors(values) -> list[dict]:
        return [
            {
                "name": v.name,
                "shape": _shape(v.type.tensor_type.shape.dim),
                "dtype": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
            }
            for v in values
            if v.name not in initializers
        ]

    layers = [
        {
            "name": node.name or (node.output[0] if node.output else node.op_type),
            "type": node.op_type,
            "parameters": sum(sizes.get(i, 0) for i in node.input),
        }
        for node in graph.node
    ]
    return {
        "format": "onnx",
        "opset": max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=None),
        "inputs": tensors(graph.input),
        "outputs": tensors(graph.output),
        "parameters": sum(sizes.values()),
        "op_counts": dict(Counter(node.op_type for node in graph.node).most_common()),
        "layers": layers[:MAX_LAYERS],
        "layers_total": len(layers),
    }


class Refused(Exception):
    """A file the static reader does not read, with the reason shown as its entry's error."""


def _describe_torch(path: Path) -> dict:
    kind = "pytorch"
    try:
        if not zipfile.is_zipfile(path):
            return _describe_legacy(path)
        directory = _zip_directory_size(path)
        if directory > MAX_ZIP_DIRECTORY:
            raise Refused(f"a zip directory of {directory:,} bytes (at most {MAX_ZIP_DIRECTORY:,})")
        with zipfile.ZipFile(path) as archive:
            files = _Archive(archive)
            if files.is_torchscript:
                kind = "torchscript"
                return _describe_torchscript(files)
            return _describe_saved(files.load("data.pkl"))
    except Refused as exc:
        return {"format": kind, "error": str(exc)}
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        return {"format": kind, "error": f"cannot read the file: {exc}"}


def _zip_directory_size(path: Path) -> int:
    """Return the size of a zip's central directory as its end records declare it, as zipfile reads them."""
    with path.open("rb") as file:
        size = file.seek(0, io.SEEK_END)
        tail_start = max(0, size - 22 - 0xFFFF)  # the end record, after a comment of up to 64 KiB
        file.seek(tail_start)
        tail = file.read()
        end = tail.rfind(b"PK\x05\x06")
        if end < 0:
            return 0
        declared = int.from_bytes(tail[end + 12 : end + 16], "little")
        locator = end - 20
        if locator >= 0 and tail[locator : locator + 4] == b"PK\x06\x07":  # zip64: its own end record
            file.seek(int.from_bytes(tail[locator + 8 : locator + 16], "little"))
            record = file.read(56)
            if record[:4] == b"PK\x06\x06":
                declared = max(declared, int.from_bytes(record[40:48], "little"))
        return declared


# --- the pickle check: every opcode looked at before the unpickler sees one -------------------

_STRINGS = {
    "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
}  # fmt: skip
_SMALL_INTS = {"BININT", "BININT1", "BININT2", "NONE", "NEWTRUE", "NEWFALSE"}
_GROWS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}  # change the object below
_KEYS = {  # where each opcode that hashes keys finds them: (items below the mark, items above it)
    "SETITEM": lambda below, above: below[1:2],
    "SETITEMS": lambda below, above: above[::2],
    "DICT": lambda below, above: above[::2],
    "ADDITEMS": lambda below, above: above,
    "FROZENSET": lambda below, above: above,
}
_NOT_READ = {  # torch never writes these; each reaches beyond the file (extension registry, buffers)
    "EXT1", "EXT2", "EXT4", "NEXT_BUFFER", "READONLY_BUFFER",
}  # fmt: skip
_FIXED, _SIZED, _LINES = 1, 2, 3  # an opcode's argument: n bytes; n bytes of length, then data; n lines
_ACTIONS = {  # opcodes the check handles apart from the stack rule every other one follows
    "PUT": "put", "BINPUT": "put", "LONG_BINPUT": "put", "MEMOIZE": "put",
    "GET": "get", "BINGET": "get", "LONG_BINGET": "get",
    "MARK": "mark", "STOP": "stop", "FRAME": "frame", "POP": "pop", "DUP": "dup",
    "INT": "int", "LONG": "int", "LONG1": "int", "LONG4": "int",
    **dict.fromkeys(_NOT_READ, "not read"),
}  # fmt: skip
_CONTAINERS = {"EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"}  # made from nothing, then grown in place


class _Item:
    """What the check knows of one value on the pickle's stack: its nesting, expanded size and kind."""

    __slots__ = ("nesting", "size", "hash_safe")

    def __init__(self, nesting: int = 0, size: int = 1, hash_safe: bool = False):
        self.nesting = nesting
        self.size = size  # values reached through it as a tree: memo references counted each time
        self.hash_safe = hash_safe  # str, bytes, small int, bool or None: keys whose hashes cannot collide


def _opcode_table() -> list[tuple | None]:
    """Return, indexed by opcode byte, what the check needs of it (None: not an opcode).

    Each entry: name, how its argument is read (_FIXED, _SIZED, _LINES or 0) with its byte count
    or lines and whether a length is signed, values popped below a MARK (all of them when none),
    whether it pops to a MARK, whether it pushes, its action, whether it grows the value below,
    the item it pushes from nothing (shared: leaves never grow; None: a fresh one each time) and
    where it finds keys it hashes.
    """
    sized = {
        pickletools.TAKEN_FROM_ARGUMENT1: (1, False),
        pickletools.TAKEN_FROM_ARGUMENT4: (4, True),
        pickletools.TAKEN_FROM_ARGUMENT4U: (4, False),
        pickletools.TAKEN_FROM_ARGUMENT8U: (8, False),
    }
    table: list[tuple | None] = [None] * 256
    for op in pickletools.opcodes:
        arg = op.arg
        if arg is None:
            read = (0, 0, False)
        elif arg.n >= 0:
            read = (_FIXED, arg.n, False)
        elif arg.n == pickletools.UP_TO_NEWLINE:
            read = (_LINES, 2 if arg.name == "stringnl_noescape_pair" else 1, False)
        else:
            read = (_SIZED, *sized[arg.n])
        marked = pickletools.markobject in op.stack_before
        fixed = op.stack_before.index(pickletools.markobject) if marked else len(op.stack_before)
        leaf = None
        if not fixed and not marked and op.stack_after and op.name not in _CONTAINERS:
            leaf = _Item(hash_safe=op.name in _STRINGS or op.name in _SMALL_INTS)
        table[ord(op.code)] = (
            op.name,
            *read,
            fixed,
            marked,
            bool(op.stack_after),
            _ACTIONS.get(op.name, ""),
            op.name in _GROWS,
            leaf,
            _KEYS.get(op.name),
        )
    return table


_OPCODES = _opcode_table()


def _int_arg(name: str, arg: bytes, where: str, pos: int) -> int:
    """Decode an opcode's integer argument, refusing one over MAX_INT_BITS before it is decoded."""
    if name in ("LONG1", "LONG4"):
        if len(arg) * 8 > MAX_INT_BITS + 8:
            raise Refused(f"{where}: an integer of {len(arg) * 8:,} bits at byte {pos}")
        value = int.from_bytes(arg, "little", signed=True)
    elif name in ("INT", "LONG", "PUT", "GET"):
        text = arg.rstrip(b"\r\n").removesuffix(b"L")
        if len(text) > MAX_INT_BITS // 3:
            raise Refused(f"{where}: an integer of {len(text):,} digits at byte {pos}")
        value = int(text)
    else:
        value = int.from_bytes(arg, "little")  # memo indices and frame sizes: unsigned
    if value.bit_length() > MAX_INT_BITS:
        raise Refused(f"{where}: an integer of {value.bit_length():,} bits at byte {pos}")
    return value


def check_pickle(data: bytes, where: str, start: int = 0) -> int:
    """Refuse a pickle past the bounds above; return where it ends (the byte after STOP).

    The opcodes are walked as the unpickler will, with no value built: only each stack entry's
    nesting, the values it expands to and whether it hashes safely.
    """
    stack: list[_Item] = []
    marks: list[int] = []
    memo: dict[int, _Item] = {}
    odd_keys = count = 0
    pos, end = start, len(data)
    opcodes, most = _OPCODES, MAX_OPCODES
    try:
        while True:
            count += 1
            if count > most:
                raise Refused(f"{where}: more than {MAX_OPCODES:,} pickle opcodes")
            if pos >= end:
                raise Refused(f"{where}: the pickle ends before its STOP")
            at = pos
            op = opcodes[data[pos]]
            if op is None:
                raise Refused(f"{where}: not a pickle opcode ({data[pos]:#04x}) at byte {pos}")
            name, read, n, signed, fixed, marked, pushes, action, grows, leaf, keys = op
            pos += 1
            if read == _FIXED:
                pos += n
            elif read == _SIZED:
                length = int.from_bytes(data[pos : pos + n], "little", signed=signed)
                if length < 0:
                    raise Refused(f"{where}: a negative length at byte {at}")
                pos += n + length
            elif read == _LINES:
                for _ in range(n):
                    newline = data.find(b"\n", pos)
                    pos = end + 1 if newline < 0 else newline + 1
            if pos > end:
                raise Refused(f"{where}: the pickle ends inside its opcode {name} at byte {at}")
            if leaf is not None and not action:
                stack.append(leaf)
                continue
            if action:
                if action == "get":
                    index = (
                        data[at + 1] if name == "BINGET" else _int_arg(name, data[at + 1 : pos], where, at)
                    )
                    stack.append(memo[index])
                    continue
                if action == "put":
                    if name == "BINPUT":
                        index = data[at + 1]
                    else:
                        index = (
                            len(memo) if name == "MEMOIZE" else _int_arg(name, data[at + 1 : pos], where, at)
                        )
                    if index >= MAX_MEMO:
                        raise Refused(f"{where}: memo index {index:,} at byte {at} (at most {MAX_MEMO:,})")
                    memo[index] = stack[-1]
                    continue
                if action == "mark":
                    marks.append(len(stack))
                    if len(marks) > MAX_NESTING:
                        raise Refused(f"{where}: more than {MAX_NESTING:,} MARKs open at byte {at}")
                    continue
                if action == "stop":
                    if len(stack) != 1 or marks:
                        raise Refused(f"{where}: the pickle's stack is not one value at its STOP")
                    return pos
                if action == "frame":
                    if _int_arg(name, data[at + 1 : pos], where, at) > end - pos:
                        raise Refused(f"{where}: a frame at byte {at} runs past the end")
                    continue
                if action == "pop" and marks and marks[-1] == len(stack):
                    marks.pop()  # POP right after MARK drops the mark
                    continue
                if action == "dup":
                    stack.append(stack[-1])
                    continue
                if action == "int":
                    arg = data[at + 1 + (n if read == _SIZED else 0) : pos]
                    stack.append(_Item(hash_safe=_int_arg(name, arg, where, at).bit_length() <= 60))
                    continue
                if action == "not read":
                    raise Refused(f"{where}: pickle opcode {name} at byte {at} is not read")
            if not fixed and not marked:
                if pushes:
                    stack.append(_Item())  # an empty list, dict or set, grown later
                continue
            above: list[_Item] = []
            if marked:
                mark = marks.pop()
                above = stack[mark:]
                del stack[mark:]
            if len(stack) < fixed:
                raise Refused(f"{where}: opcode {name} at byte {at} finds too few values")
            below = stack[len(stack) - fixed :]
            del stack[len(stack) - fixed :]
            if keys:
                odd_keys += sum(not key.hash_safe for key in keys(below, above))
                if odd_keys > MAX_ODD_KEYS:
                    raise Refused(
                        f"{where}: more than {MAX_ODD_KEYS:,} dict or set keys that are not str or int"
                    )
            if not pushes:
                continue
            parts = below + above
            if grows:  # the object below changes in place, as memo entries of it see
                item, parts = parts[0], parts[1:]
                item.size += sum(p.size for p in parts)
                item.nesting = max([item.nesting] + [p.nesting + 1 for p in parts])
            else:
                item = _Item(1 + max((p.nesting for p in parts), default=0), 1 + sum(p.size for p in parts))
            if item.nesting > MAX_NESTING:
                raise Refused(f"{where}: values nested more than {MAX_NESTING:,} deep at byte {at}")
            if item.size > MAX_EXPANDED:
                raise Refused(
                    f"{where}: memo references at byte {at} expand to more than {MAX_EXPANDED:,} values"
                )
            stack.append(item)
    except (KeyError, IndexError, ValueError) as exc:  # a GET before its PUT, a POP of nothing, bad text
        raise Refused(f"{where}: not a readable pickle ({type(exc).__name__}: {exc})") from None


# --- the restricted unpickler: stand-ins that only record ----------------------------------------


class _Record:
    """Base of everything the file can reach: BUILD on it changes nothing (reader's records stay as made)."""

    __slots__ = ()

    def __setstate__(self, state) -> None:
        """Keep nothing the file sets."""


class _Dtype(_Record):
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    @property
    def itemsize(self) -> int | None:
        return DTYPE_SIZES.get(self.name)


class _StorageType(_Record):
    __slots__ = ("dtype", "untyped")

    def __init__(self, dtype: _Dtype, untyped: bool):
        self.dtype, self.untyped = dtype, untyped  # untyped: its record counts bytes, not elements


class _Storage(_Record):
    __slots__ = ("key", "dtype", "nbytes")

    def __init__(self, key: str, dtype: _Dtype, nbytes: int | None):
        self.key, self.dtype = key, dtype
        self.nbytes = nbytes  # None where the format keeps no size at hand (legacy files)


class _Tensor(_Record):
    """A tensor as the file describes it: shape and dtype, its data never read."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: _Dtype):
        self.shape, self.dtype = shape, dtype

    @property
    def numel(self) -> int:
        return prod(self.shape)


class _Value(_Record):
    """A value the file builds from a known harmless type (a set, a device), kept unread."""

    __slots__ = ("qualname",)

    def __init__(self, qualname: str):
        self.qualname = qualname


class _Dict(dict):
    """An OrderedDict the file builds: a plain dict that ignores what BUILD sets (`_metadata`)."""

    __slots__ = ()

    def __setstate__(self, state) -> None:
        """Keep nothing."""


class _Object:
    """A stand-in for an instance of a class the file names: it records, and never calls anything."""

    __slots__ = ("args", "state", "items", "list_items")
    pickled_name = ""  # module.name as the file wrote it; set on the stand-in class made per name

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.args, obj.state, obj.items, obj.list_items = args, None, [], []
        return obj

    def __init__(self, *args, **kwargs):
        """Record nothing more: __new__ kept the arguments."""

    def __setstate__(self, state) -> None:
        self.state = state

    def __setitem__(self, key, value) -> None:
        self.items.append((key, value))

    def append(self, value) -> None:
        self.list_items.append(value)

    def extend(self, values) -> None:
        self.list_items.extend(values)

    def add(self, value) -> None:
        self.list_items.append(value)


class _Call(_Record):
    """A callable the file may name that the reader answers itself (rebuilding a tensor record)."""

    __slots__ = ("function",)

    def __init__(self, function):
        self.function = function

    def __call__(self, *args):
        return self.function(*args)


def _ints(value, what: str) -> tuple[int, ...]:
    if type(value) not in (tuple, list) or any(type(v) is not int or v < 0 for v in value):
        raise Refused(f"a tensor's {what} is not a list of non-negative integers")
    return tuple(value)


def _tensor(storage, offset, size, stride, dtype: _Dtype | None = None) -> _Tensor:
    if not isinstance(storage, _Storage):
        raise Refused("a tensor without a storage record")
    shape, strides, dtype = _ints(size, "shape"), _ints(stride, "stride"), dtype or storage.dtype
    if type(offset) is not int or offset < 0 or len(shape) != len(strides):
        raise Refused("a tensor whose offset or strides do not fit its shape")
    itemsize = dtype.itemsize
    if prod(shape) and itemsize and storage.nbytes is not None:
        last = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
        if (last + 1) * itemsize > storage.nbytes:
            raise Refused(
                f"a tensor of shape {list(shape)} reaches past its storage {storage.key!r} "
                f"({storage.nbytes:,} bytes)"
            )
    return _Tensor(shape, dtype)


def _tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, *metadata) -> _Tensor:
    if not isinstance(dtype, _Dtype):
        raise Refused("a tensor without a dtype")
    return _tensor(storage, offset, size, stride, dtype)


def _data(data, *rest) -> _Tensor:
    if not isinstance(data, _Tensor):
        raise Refused("a parameter without a tensor")
    return data


def _meta_tensor(dtype, size, stride, *rest) -> _Tensor:
    if not isinstance(dtype, _Dtype):
        raise Refused("a tensor without a dtype")
    return _Tensor(_ints(size, "shape"), dtype)


def _from_type(function, new_type, args, *state):
    if not isinstance(function, _Call) or type(args) is not tuple:
        raise Refused("a tensor subclass rebuilt by a function the reader does not know")
    return function(*args)


def _first(value, *rest):
    return value


def _size(shape=()) -> tuple[int, ...]:
    return _ints(shape, "size")


def _encode(text="", encoding="latin1", *rest) -> bytes:
    if type(text) is not str:
        raise Refused("bytes written as something other than text")
    return text.encode("latin-1", "replace")


def _known() -> dict[str, object]:
    """Return what the reader answers itself, by module.name: what torch.load(weights_only) allows."""
    known: dict[str, object] = {}
    for name, dtype in STORAGE_DTYPES.items():
        storage = _StorageType(_Dtype(dtype), untyped=name == "UntypedStorage")
        known[f"torch.{name}"] = known[f"torch.storage.{name}"] = storage
    known["torch.storage.TypedStorage"] = _StorageType(_Dtype("uint8"), untyped=True)
    for dtype in DTYPE_SIZES:
        known[f"torch.{dtype}"] = _Dtype(dtype)
    rebuild = {
        "_rebuild_tensor": _tensor,
        "_rebuild_tensor_v2": lambda s, o, size, stride, *rest: _tensor(s, o, size, stride),
        "_rebuild_tensor_v3": _tensor_v3,
        "_rebuild_qtensor": lambda s, o, size, stride, *rest: _tensor(s, o, size, stride),
        "_rebuild_parameter": _data,
        "_rebuild_parameter_with_state": _data,
        "_rebuild_device_tensor_from_cpu_tensor": _data,
        "_rebuild_meta_tensor_no_storage": _meta_tensor,
    }
    for name, function in rebuild.items():
        known[f"torch._utils.{name}"] = _Call(function)
    known["torch._tensor._rebuild_from_type_v2"] = _Call(_from_type)
    known["torch.nn.parameter.Parameter"] = _Call(_data)
    known["torch.Size"] = _Call(_size)
    known["_codecs.encode"] = _Call(_encode)
    known["collections.OrderedDict"] = known["collections.Counter"] = _Call(lambda *args: _Dict())
    for name in (
        "build_intlist",
        "build_doublelist",
        "build_boollist",
        "build_tensorlist",
        "restore_type_tag",
    ):
        known[f"torch.jit._pickle.{name}"] = _Call(_first)  # TorchScript's typed lists: the list itself
    builtins = [
        f"{module}.{name}"
        for module in ("builtins", "__builtin__")
        for name in ("set", "frozenset", "bytearray", "complex")
    ]
    for name in (
        "torch.device",
        "torch.serialization._get_layout",
        *builtins,  # __builtin__: their module's name in pickles of protocol 2
        "torch.per_tensor_affine",
        "torch.per_tensor_symmetric",
        "torch.per_channel_affine",
        "torch.per_channel_symmetric",
        "torch.per_channel_affine_float_qparams",
    ):
        known[name] = _Call(lambda *args, qualname=name: _Value(qualname))
    return known


KNOWN = _known()


class _Reader(pickle.Unpickler):
    """An unpickler that imports nothing: known names answered by the reader, others stand-ins."""

    def __init__(self, data: bytes, storages: dict[str, int] | None):
        super().__init__(io.BytesIO(data))
        self.storages = storages  # storage key -> bytes in the archive; None: the format has no sizes
        self.made: dict[str, type] = {}  # module.name -> its stand-in class, in the order first named
        self.kept: dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        qualname = f"{module}.{name}"
        known = KNOWN.get(qualname)
        if known is not None:
            return known
        made = self.made.get(qualname)
        if made is None:
            if len(self.made) >= MAX_CLASSES:
                raise Refused(f"more than {MAX_CLASSES:,} class names")
            made = type(name, (_Object,), {"__slots__": (), "pickled_name": qualname})
            self.made[qualname] = made
        return made

    def persistent_load(self, pid):
        if type(pid) is not tuple or len(pid) < 5 or pid[0] != "storage":
            raise Refused("a persistent id that is not a tensor storage")
        kind, key, numel = pid[1], pid[2], pid[4]
        if not isinstance(kind, _StorageType) or type(key) is not str or type(numel) is not int:
            raise Refused("a tensor storage record of unknown type")
        if key in self.kept:
            return self.kept[key]
        nbytes = numel if kind.untyped else numel * (kind.dtype.itemsize or 0)
        if self.storages is not None:
            if key not in self.storages:
                raise Refused(f"tensor storage {key!r} is missing from the archive")
            if self.storages[key] < nbytes:
                raise Refused(
                    f"tensor storage {key!r} holds {self.storages[key]:,} bytes, its record says {nbytes:,}"
                )
        storage = self.kept[key] = _Storage(key, kind.dtype, nbytes if self.storages is not None else None)
        return storage


def unpickle(
    data: bytes, where: str, storages: dict[str, int] | None = None, start: int = 0
) -> tuple[object, _Reader, int]:
    """Check the pickle at start, then read it with stand-ins: its value, the reader, where it ends."""
    end = check_pickle(data, where, start)
    reader = _Reader(data[start:end], storages)
    try:
        return reader.load(), reader, end
    except Refused as exc:
        raise Refused(f"{where}: {exc}") from None
    except Exception as exc:  # a malformed pickle: the unpickler's own complaint says where
        raise Refused(f"{where}: not a readable pickle ({type(exc).__name__}: {exc})") from None


# --- the files --------------------------------------------------------------------------------


class _Archive:
    """A zip written by torch: entries under one top folder (data.pkl, data/KEY, code/ for TorchScript)."""

    def __init__(self, archive: zipfile.ZipFile):
        self.archive = archive
        infos = archive.infolist()
        if not infos or "/" not in infos[0].filename:
            raise Refused("a zip archive, but not one written by torch (no top folder)")
        self.prefix = infos[0].filename.split("/", 1)[0] + "/"
        self.entries = {
            i.filename[len(self.prefix) :]: i for i in infos if i.filename.startswith(self.prefix)
        }
        self.is_torchscript = any(n.split("/", 1)[-1].startswith("code/") for n in archive.namelist())
        self.storages = {n[5:]: i.file_size for n, i in self.entries.items() if n.startswith("data/")}

    def read(self, name: str, limit: int) -> bytes:
        info = self.entries.get(name)
        if info is None:
            raise Refused(f"no {name} in the archive")
        if info.file_size > limit:
            raise Refused(f"{name} is {info.file_size:,} bytes (at most {limit:,} more are read)")
        with self.archive.open(info) as entry:
            return entry.read(limit)

    def load(self, name: str) -> tuple[object, _Reader]:
        value, reader, _ = unpickle(self.read(name, MAX_PICKLE_BYTES), name, self.storages)
        return value, reader


def _describe_saved(loaded: tuple[object, _Reader]) -> dict:
    """Describe what torch.save wrote: a state dict, or a checkpoint dict holding one."""
    value, reader = loaded
    if reader.made:
        return {"format": "pytorch", "error": PICKLED_OBJECT, "classes": sorted(reader.made)}
    tensors = _state_tensors(value)
    if not tensors:
        return {"format": "pytorch", "error": "no tensors found in the file"}
    return {"format": "pytorch state dict", **_layers({key: t.shape for key, t in tensors.items()})}


def _layers(shapes: dict[str, tuple[int, ...]]) -> dict:
    """Group named weights (`hidden.weight`, `hidden.bias`) into layers with their parameter counts."""
    layers: dict[str, dict] = {}
    for key, shape in shapes.items():
        layer, _, kind = key.rpartition(".")
        entry = layers.setdefault(
            layer or key, {"name": layer or key, "type": "", "parameters": 0, "shapes": {}}
        )
        entry["parameters"] += prod(shape)
        entry["shapes"][kind or key] = list(shape)
    for entry in layers.values():
        entry["type"] = _guess_layer(entry["shapes"])
    ordered = list(layers.values())
    return {
        "parameters": sum(prod(shape) for shape in shapes.values()),
        "layers": ordered[:MAX_LAYERS],
        "layers_total": len(ordered),
    }


def _describe_npz(path: Path) -> dict:
    """Describe numpy's archive of named arrays from each array's header: no data read, no pickle loaded."""
    import numpy as np

    try:
        directory = _zip_directory_size(path)
        if directory > MAX_ZIP_DIRECTORY:
            raise Refused(f"a zip directory of {directory:,} bytes (at most {MAX_ZIP_DIRECTORY:,})")
        shapes = {}
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else None
                    read = read or np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(member, max_header_size=MAX_NPY_HEADER)
                if dtype.hasobject:
                    raise Refused(f"{info.filename} holds Python objects (a pickle): not read")
                shapes[info.filename.removesuffix(".npy")] = tuple(shape)
        if not shapes:
            return {"format": "numpy", "error": "no arrays found in the file"}
        return {"format": "numpy arrays", **_layers(shapes)}
    except Refused as exc:
        return {"format": "numpy", "error": str(exc)}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        return {"format": "numpy", "error": f"cannot read the file: {exc}"}


def _describe_legacy(path: Path) -> dict:
    """Describe a file of torch.save's format before torch 1.6: four pickles, then raw storages."""
    if tarfile.is_tarfile(path):
        return {"format": "pytorch", "error": "legacy tar format (torch before 0.4): not read"}
    with path.open("rb") as file:
        data = file.read(MAX_PICKLE_BYTES)
    try:
        magic, reader, end = unpickle(data, "the file")
    except Refused:
        magic = None
    if magic != LEGACY_MAGIC or reader.made:
        return {
            "format": "pytorch",
            "error": "not a PyTorch file: neither a zip archive nor torch.save's legacy format",
        }
    for what in ("protocol", "system info"):
        value, reader, end = unpickle(data, f"the legacy {what}", start=end)
        if reader.made or (what == "protocol" and value != LEGACY_PROTOCOL):
            raise Refused(f"legacy format with an unexpected {what}: not read")
    value, reader, _ = unpickle(data, "the legacy pickle", start=end)
    return _describe_saved((value, reader))


@dataclass(frozen=True, slots=True)
class _ScriptClass:
    is_module: bool
    parameters: tuple[str, ...]


_CLASS_LINE = re.compile(r"class (\w+)(?:\((.*)\))?:\s*$")
_PARAMETERS_LINE = re.compile(r"\s+__parameters__ = \[(.*)\]\s*$")


def _script_classes(source: str) -> dict[str, _ScriptClass]:
    """Read the classes of one TorchScript code file as text: which are modules, and their parameters."""
    classes: dict[str, _ScriptClass] = {}
    current = None
    for line in source.splitlines():
        if match := _CLASS_LINE.match(line):
            current = match[1]
            classes[current] = _ScriptClass((match[2] or "").strip() == "Module", ())
        elif current and (match := _PARAMETERS_LINE.match(line)):
            classes[current] = _ScriptClass(
                classes[current].is_module, tuple(re.findall(r'"([^"]*)"', match[1]))
            )
        elif line and not line[0].isspace():
            current = None
    return classes


def _describe_torchscript(files: _Archive) -> dict:
    """Describe a TorchScript archive as torch.jit.load's named_modules() and parameters() would."""
    if "data.pkl" not in files.entries:
        raise Refused("TorchScript archive of the format before torch 1.4 (no data.pkl): not read")
    root, reader = files.load("data.pkl")
    sources: dict[str, dict[str, _ScriptClass]] = {}
    classes: dict[str, _ScriptClass] = {}
    not_run = []
    code_left = MAX_CODE_BYTES
    for qualname in reader.made:
        module, _, name = qualname.rpartition(".")
        if not module.startswith("__torch__"):
            not_run.append(qualname)  # TorchScript would not know it; here it is a stand-in
            continue
        code = "code/" + module.replace(".", "/") + ".py"
        if code not in sources:
            text = files.read(code, code_left)
            code_left -= len(text)
            sources[code] = _script_classes(text.decode("utf-8", "replace"))
        if name not in sources[code]:
            raise Refused(f"class {qualname} is not defined in the archive's {code}")
        classes[qualname] = sources[code][name]

    def is_module(value) -> bool:
        return (
            isinstance(value, _Object)
            and value.pickled_name in classes
            and classes[value.pickled_name].is_module
        )

    if not is_module(root):
        raise Refused("the archive's data.pkl does not hold a module")
    layers, counted = [], {}
    todo = [("", root)]
    while todo:
        name, module = todo.pop()
        if len(layers) >= MAX_MODULES:
            raise Refused(f"more than {MAX_MODULES:,} layers (submodules repeated or nested in a loop)")
        state = module.state if isinstance(module.state, dict) else {}
        if module.state is not None and not isinstance(module.state, dict):
            not_run.append(f"{module.pickled_name}.__setstate__")
        own = [state.get(key) for key in classes[module.pickled_name].parameters]
        own = [tensor for tensor in own if isinstance(tensor, _Tensor)]
        counted |= {id(tensor): tensor.numel for tensor in own}
        layers.append(
            {
                "name": name or "(root)",
                "type": type(module).__name__,
                "parameters": sum(tensor.numel for tensor in own),
            }
        )
        children = [(key, value) for key, value in state.items() if type(key) is str and is_module(value)]
        todo.extend((f"{name}.{key}" if name else key, child) for key, child in reversed(children))
    described = {
        "format": "torchscript",
        "parameters": sum(counted.values()),
        "layers": layers[:MAX_LAYERS],
        "layers_total": len(layers),
    }
    if not_run:
        described["not_run"] = sorted(set(not_run))
    return described


def _state_tensors(state, prefix: str = "") -> dict[str, _Tensor]:
    """Return the tensors of a state dict, also inside a checkpoint dict ({"model": state_dict, ...})."""
    found = {}
    if isinstance(state, dict):
        for key, value in state.items():
            name = f"{prefix}{key}"
            if isinstance(value, _Tensor):
                found[name] = value
            elif isinstance(value, dict) and not prefix:
                found |= _state_tensors(value, f"{name}.")
    return found


def _guess_layer(shapes: dict[str, list[int]]) -> str:
    """Name a layer from the shapes of its weights: what a reader recognises."""
    weight = shapes.get("weight")
    if "running_mean" in shapes:
        return "BatchNorm"
    if weight is None:
        return "tensors"
    if len(weight) == 4:
        return f"Conv2d {weight[1]}->{weight[0]} {weight[2]}x{weight[3]}"
    if len(weight) == 2:
        return f"Linear {weight[1]}->{weight[0]}"
    if len(weight) == 1:
        return "Norm"
    return f"{len(weight)}-d weight"
