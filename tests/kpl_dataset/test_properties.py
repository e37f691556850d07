"""Property tests: generated record types round-trip; damaged files never give wrong data."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpl_dataset import BasicType, KPLDatasetError, ReadOnlyDataset, WriteOnlyDataset

LEAVES = {
    BasicType.String: st.text(max_size=8),
    BasicType.Int: st.integers(min_value=-(2**63), max_value=2**63 - 1),
    BasicType.Float: st.floats(allow_nan=False),
    BasicType.Bool: st.booleans(),
    BasicType.ByteArray: st.binary(max_size=16),
}

keys = st.text(min_size=1, max_size=5)
record_types = st.recursive(
    st.sampled_from(sorted(LEAVES)),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=1),
        st.dictionaries(keys, inner, min_size=1, max_size=3),
    ),
    max_leaves=6,
)
top_level = st.dictionaries(keys, record_types, min_size=1, max_size=4)


def values_of(record_type):
    """Return a strategy of values matching a record_type node."""
    if isinstance(record_type, dict):
        return st.fixed_dictionaries({k: values_of(v) for k, v in record_type.items()})
    if isinstance(record_type, list):
        return st.lists(values_of(record_type[0]), max_size=3)
    return LEAVES[record_type]


@st.composite
def datasets(draw):
    record_type = draw(top_level)
    records = draw(st.lists(values_of(record_type), max_size=12))
    batch_rows = draw(st.integers(min_value=1, max_value=5))
    return record_type, records, batch_rows


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_generated_datasets_round_trip(dataset):
    record_type, records, batch_rows = dataset
    with tempfile.TemporaryDirectory() as tmp:
        with WriteOnlyDataset(tmp, "p", record_type, batch_rows=batch_rows, shard_rows=7) as w:
            for r in records:
                w.write(r)
        reader = ReadOnlyDataset(tmp, "p")
        assert reader.record_type == record_type
        assert list(reader) == records
        assert [reader[i] for i in range(-len(records), 0)] == records
        assert reader.to_arrow().to_pylist() == records


RT = {"i": BasicType.Int, "s": BasicType.String, "objs": [{"b": BasicType.ByteArray, "f": BasicType.Float}]}
RECORDS = [{"i": i, "s": "值" * i, "objs": [{"b": bytes([i]) * i, "f": i / 2}] * (i % 3)} for i in range(12)]


def _read_everything(tmp: str, verify: bool) -> None:
    """Read every record; each one must be exactly right unless an error is raised."""
    reader = ReadOnlyDataset(tmp, None, verify=verify)
    if verify:
        assert len(reader) == len(RECORDS)
    for i in range(len(reader)):
        assert reader[i] == RECORDS[i]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    target=st.sampled_from(["shard", "manifest"]),
    damage=st.sampled_from(["truncate", "flip"]),
    position=st.floats(min_value=0, max_value=1, exclude_max=True),
    mask=st.integers(min_value=1, max_value=255),
)
def test_damaged_files_give_error_or_correct_data(target, damage, position, mask):
    with tempfile.TemporaryDirectory() as tmp:
        with WriteOnlyDataset(tmp, None, RT, batch_rows=4) as w:
            for r in RECORDS:
                w.write(r)
        with open(os.path.join(tmp, "root.manifest.json"), "rb") as f:
            manifest = json.load(f)
        path = os.path.join(tmp, manifest["shards"][0]["path"] if target == "shard" else "root.manifest.json")
        with open(path, "rb") as f:
            data = bytearray(f.read())
        at = int(position * len(data))
        if damage == "truncate":
            del data[at:]
        else:
            data[at] ^= mask
        with open(path, "wb") as f:
            f.write(data)
        with contextlib.suppress(KPLDatasetError):
            _read_everything(tmp, verify=True)
