"""What users' processes find in their environment: an allowlist, never a copy of the platform's.

Jobs, deployments' servers, notebooks and sandboxed workers get the variables of their
contract (`KPL_ENV_*`, their devices, ...) plus only these of the platform's own environment:
what finds programs and libraries, the locale and the time zone. Anything else the platform
holds (its hub token, the gateway's, a database URL with a password, storage credentials)
never reaches them. An administrator adds names with `c.Platform.passed_environment`
(e.g. `HTTP_PROXY`, `WANDB_*`); the hub's and the gateway's tokens (`NEVER`) are never passed.

Kept free of heavy imports: every supervisor imports it before starting its job.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

PASSED = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "TMPDIR",
    "LD_LIBRARY_PATH",  # CUDA and other native libraries outside the default paths
    "CUDA_HOME",
    "NCCL_*",
)


# the platform's own credentials: never passed on, whatever an administrator adds
NEVER = ("JUPYTERHUB_*", "JPY_*", "KPL_GATEWAY_API_TOKEN")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def passes(name: str, passed: Iterable[str] = PASSED) -> bool:
    """Say whether a variable of the platform's environment may reach a user's process."""
    return _matches(name, passed) and not _matches(name, NEVER)


def passed(source: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> dict[str, str]:
    """Return the variables of `source` (default: this process's environment) that users' processes get."""
    allowed = (*PASSED, *extra)
    return {
        name: value
        for name, value in (os.environ if source is None else source).items()
        if passes(name, allowed)
    }


def for_account(env: dict[str, str], account: str, home: str) -> dict[str, str]:
    """Return `env` with the names and home of the account a process runs as."""
    return {**env, "USER": account, "LOGNAME": account, "HOME": home}
