"""What algorithm code imports to run on KPL Lab, and unchanged outside it (kpl-helper 0.1.3 API)."""

from kpl_helper import deploy, io, metric, progress, result
from kpl_helper.base import done, ready
from kpl_helper.distributed import get_local_rank, get_rank, get_world_size
from kpl_helper.io import get_input_path, get_output_path
from kpl_helper.parameter import get_parameter, write_parameter
from kpl_helper.progress import send_progress
from kpl_helper.save import save_algorithm, save_dataset, save_model
from kpl_helper.stop import kill

__all__ = [
    "deploy",
    "done",
    "get_input_path",
    "get_local_rank",
    "get_output_path",
    "get_parameter",
    "get_rank",
    "get_world_size",
    "io",
    "kill",
    "metric",
    "progress",
    "ready",
    "result",
    "save_algorithm",
    "save_dataset",
    "save_model",
    "send_progress",
    "write_parameter",
]
