"""The PyTorch adapter with a real DataLoader (2 workers) and the distributed sampler."""

from __future__ import annotations

import collections

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from kpl_dataset import BasicType, WriteOnlyDataset  # noqa: E402
from kpl_dataset.torch import KPLDistributedSampler, KPLTorchDataset  # noqa: E402

RT = {"id": BasicType.Int, "x": [BasicType.Float], "blob": BasicType.ByteArray}


@pytest.fixture
def dataset_dir(tmp_path):
    with WriteOnlyDataset(tmp_path, "train", RT, batch_rows=8) as w:
        for i in range(50):
            w.write({"id": i, "x": [float(i), 1.0], "blob": bytes([i]) * 10})
    return tmp_path


def to_tensor(record):
    return {"id": record["id"], "x": torch.tensor(record["x"])}


def test_map_style_dataset(dataset_dir):
    ds = KPLTorchDataset(dataset_dir, "train", transform=to_tensor)
    assert len(ds) == 50
    assert ds[7]["id"] == 7 and torch.equal(ds[7]["x"], torch.tensor([7.0, 1.0]))
    projected = KPLTorchDataset(dataset_dir, "train", columns=["id"])
    assert projected[3] == {"id": 3}


def test_dataloader_with_two_workers(dataset_dir):
    ds = KPLTorchDataset(dataset_dir, "train", transform=to_tensor)
    loader = DataLoader(ds, batch_size=4, num_workers=2, shuffle=False)
    ids = torch.cat([batch["id"] for batch in loader]).tolist()
    assert ids == list(range(50))


@pytest.mark.parametrize("size,world", [(50, 2), (50, 5), (48, 4)])
def test_ranks_cover_the_dataset_exactly_once(size, world):
    shares = [
        list(KPLDistributedSampler(size, num_replicas=world, rank=r, seed=3, drop_last=True))
        for r in range(world)
    ]
    assert len({len(s) for s in shares}) == 1
    flat = [i for s in shares for i in s]
    assert len(flat) == len(set(flat)) == size - size % world


def test_padding_keeps_shares_equal_and_covers_everything():
    shares = [list(KPLDistributedSampler(50, num_replicas=4, rank=r, seed=1)) for r in range(4)]
    assert [len(s) for s in shares] == [13] * 4
    counts = collections.Counter(i for s in shares for i in s)
    assert set(counts) == set(range(50)) and sum(counts.values()) == 52


def test_order_is_deterministic_and_changes_per_epoch():
    a = KPLDistributedSampler(50, num_replicas=2, rank=0, seed=7)
    b = KPLDistributedSampler(50, num_replicas=2, rank=0, seed=7)
    first = list(a)
    assert first == list(b)
    a.set_epoch(1)
    b.set_epoch(1)
    assert list(a) == list(b) != first
    a.set_epoch(0)
    assert list(a) == first
    assert list(KPLDistributedSampler(50, num_replicas=2, rank=0, seed=8)) != first
    assert list(KPLDistributedSampler(10, num_replicas=2, rank=1, shuffle=False)) == [1, 3, 5, 7, 9]
    with pytest.raises(ValueError, match="rank 2"):
        KPLDistributedSampler(10, num_replicas=2, rank=2)


def test_dataloader_with_sampler_per_rank(dataset_dir):
    ds = KPLTorchDataset(dataset_dir, "train")
    seen = []
    for rank in range(2):
        sampler = KPLDistributedSampler(ds, num_replicas=2, rank=rank, seed=11)
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=5, sampler=sampler, num_workers=2)
        for batch in loader:
            assert batch["blob"] == [bytes([i]) * 10 for i in batch["id"].tolist()]
            seen += batch["id"].tolist()
    assert sorted(seen) == list(range(50))


def test_missing_torch_says_how_to_install():
    import subprocess
    import sys

    code = "import sys\nsys.modules['torch'] = None\ntry:\n    import kpl_dataset.torch\nexcept ImportError as e:\n    print(e)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install torch" in out
