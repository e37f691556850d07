"""Measure what the REST API serves from big data: a page of records with thumbnails, downsampled metrics.

Beside each, the same answer computed naively: the page by reading the whole dataset,
the metrics by reading every point. Everything is real: a kpl-dataset of --records small
PNG images on disk, a platform home with SQLite, a job whose events are ingested.

    python benchmarks/api.py                         # 1M records, 1M metric points
    python benchmarks/api.py --records 100000 --points 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

PAGE = 50
THUMBNAIL = 128


def timed(function, repeat: int) -> float:
    """Return the median seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def make_dataset(folder: Path, records: int) -> float:
    """Write `records` small PNG images (256 distinct ones, 64x48) with a class name; return seconds."""
    from PIL import Image

    from kpl_dataset import BasicType, WriteOnlyDataset

    rng = random.Random(0)
    images = []
    for _ in range(256):
        image = Image.new("RGB", (64, 48), tuple(rng.randrange(256) for _ in range(3)))
        image.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(64 * 48)])
        out = io.BytesIO()
        image.save(out, format="PNG")
        images.append(out.getvalue())
    record_type = {
        "path": BasicType.String,
        "contentType": BasicType.String,
        "content": BasicType.ByteArray,
        "class_name": BasicType.String,
    }
    start = time.perf_counter()
    writer = WriteOnlyDataset(str(folder), "root", record_type)
    for i in range(records):
        writer.write(
            {
                "path": f"img/{i}.png",
                "contentType": "image/png",
                "content": images[i % 256],
                "class_name": f"c{i % 10}",
            }
        )
    writer.close()
    return time.perf_counter() - start


def naive_page(folder: Path, offset: int) -> list:
    """Read every record, then take the page and make its thumbnails without a cache."""
    from PIL import Image

    from kpl_dataset import ReadOnlyDataset

    with ReadOnlyDataset(str(folder)) as reader:
        everything = list(reader)
    page = everything[offset : offset + PAGE]
    for record in page:
        with Image.open(io.BytesIO(record["content"])) as image:
            image.thumbnail((THUMBNAIL, THUMBNAIL))
            image.save(io.BytesIO(), format="PNG")
    return page


def bench_page(root: Path, records: int, repeat: int) -> dict[str, float]:
    from kpl_lab.catalog.datasets_view import DatasetView

    folder = root / "dataset"
    seconds = make_dataset(folder, records)
    print(f"wrote {records} records in {seconds:.1f} s", file=sys.stderr)
    view = DatasetView(folder, root / "cache", "bench:1")
    offsets = iter(range(records // 3, records, PAGE * 7))

    def page(offset: int) -> None:
        answer = view.page(None, offset, PAGE, None, lambda part, i, path: f"/{i}/{path}")
        for record in answer["records"]:
            view.thumbnail(None, record["index"], "content", THUMBNAIL)

    first = timed(lambda: page(next(offsets)), repeat)  # a new page each time: nothing cached
    page(records // 2)
    cached = timed(lambda: page(records // 2), repeat)
    naive = timed(lambda: naive_page(folder, records // 2), max(1, min(repeat, 3)))
    return {"first": first, "cached": cached, "naive": naive}


def bench_metrics(root: Path, points: int, repeat: int) -> dict[str, float]:
    from sqlalchemy import select
    from traitlets.config import Config

    from kpl_lab.catalog.jobs import Metric
    from kpl_lab.engine.service import JobRequest
    from kpl_lab.platform import Platform

    platform = Platform(home=str(root / "home"), config=Config({"Ledger": {"cpu": 1.0, "memory": 1024}}))
    src = root / "src" / "empty"
    src.mkdir(parents=True)
    (src / "environment.yml").write_text(
        "version: 1\nimage:\n  runs: []\ntrain:\n  resource:\n    limits:\n      cpu: 1\n      memory: 256\n"
        "  cmd: python empty.py\n"
    )
    (src / "empty.py").write_text("pass\n")
    platform.catalog.add_algorithm("bench", src)
    job = platform.jobs.submit(JobRequest(project="bench", algorithm="empty"))
    while not (job := platform.jobs.get("bench", job.id)).is_final:
        time.sleep(0.05)
    with open(platform.jobs.run_dir(job) / "events.jsonl", "a") as out:
        for i in range(points):
            event = {
                "type": "metric",
                "time": 1e9 + i,
                "title": "loss",
                "x": i,
                "values": {"train": (i % 97) / 97},
            }
            out.write(json.dumps(event) + "\n")
    start = time.perf_counter()
    platform.jobs.ingest(job.id)
    print(f"ingested {points} points in {time.perf_counter() - start:.1f} s", file=sys.stderr)

    def downsampled() -> None:
        figures = platform.jobs.metrics("bench", job.id, max_points=1000)
        assert len(figures["loss"]["train"]) <= 1000

    def naive() -> None:
        with platform.session() as session:
            rows = session.execute(
                select(Metric.x, Metric.value).where(Metric.job_id == job.id).order_by(Metric.step)
            ).all()
        assert len(rows) == points

    result = {"downsampled": timed(downsampled, repeat), "naive": timed(naive, max(1, min(repeat, 3)))}
    platform.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the dataset")
    parser.add_argument("--points", type=int, default=1_000_000, help="points of the metric series")
    parser.add_argument("--repeat", type=int, default=5, help="repeats (median); naive work at most 3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kpl-bench-api-") as tmp:
        root = Path(tmp)
        page = bench_page(root, args.records, args.repeat)
        metrics = bench_metrics(root, args.points, args.repeat)
    rows = [
        (f"page of {PAGE} records + thumbnails, first", page["first"], page["naive"]),
        (f"page of {PAGE} records + thumbnails, cached", page["cached"], page["naive"]),
        (f"metrics, {args.points} points -> 1000", metrics["downsampled"], metrics["naive"]),
    ]
    print(f"{'work':<44} {'ours':>10} {'naive (full read)':>18} {'ratio':>8}")
    for name, ours, naive in rows:
        print(f"{name:<44} {ours * 1000:>8.1f} ms {naive * 1000:>15.1f} ms {naive / ours:>7.0f}x")
    print(f"({args.records} records, {args.points} points, median of {args.repeat}; naive median of <= 3)")


if __name__ == "__main__":
    main()
