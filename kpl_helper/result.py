"""Final results of a test job: scalars (accuracy, mAP) and curves (ROC, PR)."""

from __future__ import annotations

from kpl_helper import events
from kpl_helper.metric import number


def _scalar(value, name: str):
    if isinstance(value, (bool, str, int)):
        return value
    return number(value, f"result {name!r}")


def send_scalar_result(**results) -> None:
    """Send named scalar results, e.g. send_scalar_result(top1=0.91, top5=0.99)."""
    values = {name: _scalar(value, name) for name, value in results.items()}
    events.emit("result", values=values)


def send_curve_result(title: str, x_name: str, x_points, y_name: str, y_points) -> None:
    """Send one result curve: y_points over x_points, of the same length."""
    x = [number(v, f"curve {title!r} {x_name} point {i}") for i, v in enumerate(x_points)]
    y = [number(v, f"curve {title!r} {y_name} point {i}") for i, v in enumerate(y_points)]
    if len(x) != len(y):
        raise ValueError(f"curve {title!r}: {len(x)} {x_name} points but {len(y)} {y_name} points")
    events.emit("result", title=str(title), x_name=str(x_name), x=x, y_name=str(y_name), y=y)
