"""Read the job's environment variables, say ready and done, and log like the original."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass


class _StdoutHandler(logging.StreamHandler):
    """Write to whatever sys.stdout is at the time (the job's output.log, a notebook, pytest)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value):
        pass


logger = logging.getLogger("kpl-helper")
if not logger.handlers:
    # The original printed its messages to stdout (logging.basicConfig at import); do the same
    # without touching the user's root logger.
    _handler = _StdoutHandler()
    _handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


@dataclass(frozen=True)
class Config:
    """What the platform told this process through KPL_* variables (docs/job-contract.md)."""

    inner: bool
    env_type: str | None = None
    task_id: str | None = None
    function: str | None = None
    input_root: str | None = None
    output_root: str | None = None
    parameter: str | None = None
    parameter_file: str | None = None
    events_file: str | None = None
    events_url: str | None = None
    job_token: str | None = None
    run_dir: str | None = None
    api_url: str | None = None
    api_token: str | None = None
    cluster: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Config:
        """Read the configuration; KPL_INNER being set at all means inside, as in the original."""
        env = os.environ if environ is None else environ
        if env.get("KPL_INNER") is None:
            return cls(inner=False)
        return cls(
            inner=True,
            env_type=env.get("KPL_ENV"),
            task_id=env.get("KPL_ENV_TASK_ID"),
            function=env.get("KPL_ENV_FUNCTION"),
            input_root=env.get("KPL_ENV_INPUT_ROOT_PATH"),
            output_root=env.get("KPL_ENV_OUTPUT_ROOT_PATH"),
            parameter=env.get("KPL_ENV_PARAMETER"),
            parameter_file=env.get("KPL_PARAMETER_FILE"),
            events_file=env.get("KPL_EVENTS_FILE") or None,
            events_url=env.get("KPL_EVENTS_URL") or None,
            job_token=env.get("KPL_JOB_TOKEN"),
            run_dir=env.get("KPL_RUN_DIR"),
            api_url=env.get("KPL_API_URL"),
            api_token=env.get("KPL_API_TOKEN"),
            # Every Kubernetes pod has this variable; jobs of the local executor do not.
            cluster="kubernetes" if env.get("KUBERNETES_SERVICE_HOST") else "local",
        )

    @property
    def uses_defaults(self) -> bool:
        """Return True where io and get_parameter use the defaults: outside, or in a notebook."""
        return not self.inner or self.env_type == "notebook"

    # The original's accessors, kept for code that called them.
    def get_inner(self) -> bool:
        return self.inner

    def get_env_type(self) -> str | None:
        return self.env_type

    def get_task_id(self) -> int | None:
        """Return the job id as an int (the original's type): decimal as is, else read as hexadecimal."""
        if not self.inner:
            return None
        text = (self.task_id or "0").strip()
        try:
            return int(text) if text.isdecimal() else int(text, 16)
        except ValueError:
            raise ValueError(f"KPL_ENV_TASK_ID {self.task_id!r} is not a job id") from None

    def get_input_root(self) -> str:
        return self.input_root or ""

    def get_output_root(self) -> str:
        return self.output_root or ""

    def get_parameter(self) -> str | None:
        return self.parameter if self.inner else "{}"

    def get_api_url(self) -> str:
        """Return the platform's REST API (KPL_API_URL), without a trailing slash; "" when unknown."""
        return (self.api_url or "").rstrip("/") if self.inner else ""

    def get_jwt_token(self) -> str:
        """Return the token for that API (KPL_API_TOKEN); "" when unknown."""
        return (self.api_token or "") if self.inner else ""

    def get_metric_api(self) -> str:
        """Return where this job's metrics go: KPL_EVENTS_URL, else the KPL_EVENTS_FILE path."""
        return (self.events_url or self.events_file or "") if self.inner else ""

    def get_metric_token(self) -> str:
        """Return the token that authorises the job's events (KPL_JOB_TOKEN); "" when none."""
        return (self.job_token or "") if self.inner else ""

    def get_cluster(self) -> str | None:
        """Return what runs the job: "kubernetes" or "local"; None outside (as the original)."""
        return self.cluster if self.inner else None


def get_config() -> Config:
    """Return the current configuration (read each time: cheap, and follows the environment)."""
    return Config.from_env()


def ready() -> None:
    """Tell the platform the algorithm started."""
    from kpl_helper import events

    logger.info("[kpl-helper]: ready for using.")
    events.emit("ready")


def done() -> None:
    """Tell the platform the algorithm finished, after sending every buffered event."""
    from kpl_helper import events

    logger.info("[kpl-helper]: execute kpl done()")
    events.emit("done", final=True)
