"""A sandboxed worker: `python -m kpl_lab.sandbox.worker`, answering the platform's calls on stdin/stdout.

Each call names a function of kpl_lab or kpl_dataset (`module:function`); its arguments come
pickled from the platform, its answer goes back as JSON (or bytes), an exception as its type,
message and field. A call may log (`log=True`: lines go back as they come) and keep state until
the platform resets the worker (`session()`: e.g. one DuckDB connection for a whole validation).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import sys
import threading
import traceback

from .wire import WireError, read_frame, write_frame

MODULES = ("kpl_lab.", "kpl_dataset.")  # what a call may name
_session: contextlib.ExitStack | None = None


def session() -> contextlib.ExitStack:
    """Return the state kept until the platform resets this worker (enter contexts on it)."""
    global _session
    if _session is None:
        _session = contextlib.ExitStack()
    return _session


def reset() -> None:
    """Close what the calls since the last reset kept."""
    global _session
    if _session is not None:
        stack, _session = _session, None
        stack.close()


def resolve(name: str):
    """Return the function `module:function` names, within this package's modules only."""
    module, _, function = name.partition(":")
    if not module.startswith(MODULES) or not function or function.startswith("__"):
        raise ValueError(f"{name}: not a function a sandboxed worker runs")
    target = importlib.import_module(module)
    for part in function.split("."):
        target = getattr(target, part)
    return target


def describe(error: BaseException) -> dict:
    """Return an exception as the platform rebuilds it: module, type, message, field and errors."""
    found = {
        "module": type(error).__module__,
        "type": type(error).__qualname__,
        "message": getattr(error, "message", None) or str(error) or type(error).__name__,
    }
    if hasattr(error, "field"):
        found["field"] = error.field
        found["errors"] = [list(item) for item in getattr(error, "errors", [])]
    return found


def serve(reader: int = 0, writer: int = 1) -> None:
    """Answer calls until the platform closes the pipe."""
    while True:
        try:
            header, payload = read_frame(reader)
        except WireError:
            return
        if header.get("reset"):
            reset()
            write_frame(writer, {"result": None})
            continue
        try:
            args, kwargs = pickle.loads(payload)
            if header.get("log"):
                kwargs["log"] = lambda line: write_frame(writer, {"log": str(line)})
            if header.get("stop"):
                kwargs["stop"] = threading.Event()  # a stop kills the worker: nothing sets it
            answer = resolve(header["call"])(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - every failure is the call's answer
            if not isinstance(error, Exception):
                raise
            if not getattr(error, "status", 0) and not header.get("quiet"):
                traceback.print_exc(file=sys.stderr)
            write_frame(writer, {"error": describe(error), "kept": _session is not None})
            continue
        kept = _session is not None  # the platform resets only a worker that keeps something
        if isinstance(answer, (bytes, bytearray, memoryview)):
            write_frame(writer, {"result": None, "bytes": True, "kept": kept}, bytes(answer))
        else:
            write_frame(writer, {"result": answer, "kept": kept})


def main() -> None:
    """Serve on the pipes the platform gave as stdin and stdout; what the code prints goes to stderr."""
    reader, writer = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # a stray print must not break the frames
    serve(reader, writer)


if __name__ == "__main__":  # run as the module itself, whose session() the calls' code uses
    from kpl_lab.sandbox import worker

    worker.main()
