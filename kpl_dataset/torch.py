"""PyTorch adapters: a map-style dataset over one part and a deterministic distributed sampler."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

try:
    import torch
    from torch.utils.data import Dataset, Sampler
except ImportError as err:  # torch is optional for kpl_dataset
    raise ImportError("kpl_dataset.torch needs PyTorch: pip install torch") from err

from kpl_dataset.reader import ReadOnlyDataset


class KPLTorchDataset(Dataset):
    """Map-style dataset: item i is record i (after transform); each DataLoader worker reopens the files."""

    def __init__(
        self,
        data_dir: Any,
        data_name: str | None = None,
        transform: Callable[[dict], Any] | None = None,
        columns: list[str] | None = None,
        *,
        verify: bool = True,
        filesystem: Any = None,
    ):
        self.reader = ReadOnlyDataset(
            data_dir, data_name, columns=columns, verify=verify, filesystem=filesystem
        )
        self.transform = transform

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> Any:
        record = self.reader[index]
        return self.transform(record) if self.transform is not None else record


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class KPLDistributedSampler(Sampler[int]):
    """Give each rank a disjoint, equal-length share of one global order (shuffled by seed + epoch).

    Without drop_last the global order is padded with its own first indices so every
    rank gets ceil(n / world) items; with drop_last the tail is dropped instead.
    """

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        world, own = _world()
        self.num_replicas = world if num_replicas is None else int(num_replicas)
        self.rank = own if rank is None else int(rank)
        if self.num_replicas < 1 or not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank {self.rank} is not in [0, {self.num_replicas})")
        self.size = dataset if isinstance(dataset, int) else len(dataset)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.drop_last = drop_last
        self.epoch = 0
        if drop_last:
            self.num_samples = self.size // self.num_replicas
        else:
            self.num_samples = math.ceil(self.size / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch: the same (seed, epoch) gives the same order on every rank."""
        self.epoch = int(epoch)

    def global_order(self) -> list[int]:
        """Return the order of all indices for the current epoch, padded or cut to total_size."""
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=g).tolist()
        else:
            order = list(range(self.size))
        if self.total_size > len(order) and order:
            reps = math.ceil((self.total_size - len(order)) / len(order))
            order += (order * reps)[: self.total_size - len(order)]
        return order[: self.total_size]

    def __iter__(self) -> Iterator[int]:
        return iter(self.global_order()[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples
