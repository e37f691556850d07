"""Model evaluation: one algorithm's `test` function over several model versions on one dataset.

Each model version is tested by its own job (under the project's quota and queue, as any
job); `compare_jobs` then shows their reports side by side: the scalar results the test
function sent with `kpl_helper.result`, its metrics, and which model each job read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..api.jobs import JobRequest
from ..errors import BadRequest

if TYPE_CHECKING:
    from ..catalog.jobs import Job
    from ..platform import Platform


def evaluate_models(
    platform: Platform,
    project: str,
    algorithm: str,
    data: str,
    models: list[str],
    function: str = "test",
    data_key: str = "data",
    model_key: str = "model",
    parameters: dict[str, Any] | None = None,
    user: str = "",
) -> list[Job]:
    """Submit one `function` job per model version (`model:NAME[:VERSION]`) on the dataset `data`."""
    if not models:
        raise BadRequest("models: give at least one model version to evaluate", field="models")
    refs = [ref if ref.startswith("model:") else f"model:{ref}" for ref in models]
    return [
        platform.jobs.submit(
            JobRequest(
                project=project,
                algorithm=algorithm,
                function=function,
                inputs={data_key: data, model_key: ref},
                parameters=parameters or {},
            ),
            user=user,
        )
        for ref in refs
    ]
