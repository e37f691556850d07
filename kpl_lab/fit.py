"""Resources that fit what a project may use now: the defaults of the magics, the submit form and the spawn form.

An algorithm's environment.yml asks for what its author's machine had (2 CPUs, a GPU); on
a smaller machine, or with the user's own notebook holding a core, the job would wait in
the queue for resources that may never come free. So where nothing is given, each amount
is capped at what is free now on the machine and in the project's quota, with a note
saying so. Nothing free at all: the amount stays, and the job waits in the queue saying
why. None ever (no GPU on this machine): 0, with a note. labextension/src/jobForm.ts
does the same for the submit form; the spawner caps a notebook profile's defaults so.
"""

from __future__ import annotations

import math

KINDS = ("cpu", "memory", "gpu", "npu")
WORDS = {"cpu": "CPU", "memory": "MB of memory", "gpu": "GPU", "npu": "NPU"}


def _held(held: dict, kind: str) -> float:
    if kind in ("cpu", "memory"):
        return float(held.get(kind) or 0)
    return float(len((held.get("devices") or {}).get(kind) or ()))


def room(devices: dict) -> dict[str, tuple[float, float]]:
    """Return kind -> (free now, the most it may ever have) from the `/devices` answer (`Ledger.room`).

    No `capacity` (a cluster's, unknown here): only the quota limits.
    """
    quota = devices.get("quota") or {}
    found = {}
    for kind in KINDS:
        if "capacity" in devices:
            most = _held(devices["capacity"], kind)
            free = most - _held(devices["used"], kind)
        else:
            most = free = math.inf
        if kind in quota:
            most = min(most, float(quota[kind]))
            free = min(free, float(quota[kind]) - _held(devices.get("project_used") or {}, kind))
        found[kind] = (max(0.0, free), most)
    return found


def _floor(kind: str, amount: float) -> float:
    if kind == "cpu":
        return math.floor(amount * 10 + 1e-9) / 10  # a tenth of a CPU is the finest a form offers
    return float(math.floor(amount + 1e-9))


def _words(kind: str, amount: float) -> str:
    word = WORDS[kind]
    return f"{amount:g} {word}" + ("s" if kind in ("cpu", "gpu", "npu") and amount != 1 else "")


def fit_now(
    limits: dict, devices: dict, given: dict | None = None, asker: str = "environment.yml"
) -> tuple[dict[str, float], list[str]]:
    """Return the amounts to ask in place of `limits` (only those changed) and a note for each.

    `limits`: the function's environment.yml limits (per worker); `given`: what the user
    set, never changed; `asker`: whose defaults they are, as the notes name it.
    """
    given = given or {}
    workers = max(1, int(limits.get("workers") or 1))
    changed: dict[str, float] = {}
    notes: list[str] = []
    for kind, (free, most) in room(devices).items():
        asked = float(limits.get(kind) or 0)
        if kind in given or asked <= 0 or asked * workers <= free + 1e-9:
            continue
        if most <= 0:
            changed[kind] = 0
            notes.append(f"{kind} 0: {asker} asks {_words(kind, asked)}; none can be had here")
            continue
        capped = _floor(kind, free / workers)
        if capped <= 0:
            continue  # nothing free now: it waits in the queue, saying why
        changed[kind] = int(capped) if kind != "cpu" else capped
        notes.append(
            f"{kind} capped at {capped:g}: {asker} asks {_words(kind, asked)}, "
            f"{free:g} free now" + (f" for {workers} workers" if workers > 1 else "")
        )
    return changed, notes
