"""Fixtures for kpl_dataset tests: sample records and a real S3 server on loopback."""

from __future__ import annotations

import pytest

from kpl_dataset import BasicType


def _detection_record(i: int) -> dict:
    """Return a record shaped like RectangleBoxObjectDetectionDatasetDefine."""
    return {
        "path": f"images/图片_{i}.jpg",
        "content": bytes([i % 256]) * (i % 50),
        "contentType": "image/jpeg",
        "object": [
            {
                "name": ["猫", "dog"][k % 2],
                "xmin": k,
                "xmax": k + 10,
                "ymin": -k,
                "ymax": 2**40 + k,
                "difficult": k % 2,
                "score": k / 3,
            }
            for k in range(i % 4)
        ],
    }


_ALL_TYPES = {
    "s": BasicType.String,
    "i": BasicType.Int,
    "f": BasicType.Float,
    "b": BasicType.Bool,
    "raw": BasicType.ByteArray,
    "meta": {"name": BasicType.String, "tags": [BasicType.String]},
    "boxes": [{"label": BasicType.Int, "pts": [[BasicType.Float]]}],
    "grid": [[BasicType.Int]],
}


def _all_types_record(i: int) -> dict:
    """Return a record using every kind of field in _ALL_TYPES."""
    return {
        "s": f"第{i}条 ✓",
        "i": i * (-1) ** i,
        "f": i / 7,
        "b": i % 3 == 0,
        "raw": bytes(range(i % 256)),
        "meta": {"name": f"n{i}", "tags": [f"t{k}" for k in range(i % 3)]},
        "boxes": [{"label": k, "pts": [[float(k), 0.5]] * k} for k in range(i % 3)],
        "grid": [[i, k] for k in range(i % 2)],
    }


@pytest.fixture
def detection_record():
    """Return a function i -> detection record."""
    return _detection_record


@pytest.fixture
def all_types():
    """Return (record_type with every kind of field, function i -> record)."""
    return _ALL_TYPES, _all_types_record


@pytest.fixture(scope="session")
def s3_endpoint():
    """Start moto's S3 server on a free loopback port and return its endpoint host:port."""
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_uri(s3_endpoint, monkeypatch, request):
    """Return an s3:// dataset URI in a fresh bucket on the moto server."""
    import pyarrow.fs as pafs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = "b-" + request.node.name.lower().replace("_", "-")[:50].strip("-")
    fs = pafs.S3FileSystem(
        endpoint_override=s3_endpoint,
        scheme="http",
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    fs.create_dir(bucket)
    return f"s3://{bucket}/datasets/ds?endpoint_override={s3_endpoint}&scheme=http&region=us-east-1"
