"""split, sample, shuffle, sql and parse_labelme on generated records, checked against independent computations."""

from __future__ import annotations

import json
import random
import re
import threading

import numpy as np
import pyarrow as pa
import pytest

from kpl_dataset import ReadOnlyDataset
from kpl_lab.pipelines import cache, processors
from kpl_lab.pipelines.processors import uniform
from kpl_lab.pipelines.runner import PipelineRunner


def _records(n: int) -> list[dict]:
    return [
        {"path": f"d/{i:04d}.jpg", "contentType": "image/jpeg", "content": bytes([i % 256]) * 3}
        for i in range(n)
    ]


def _output(lab, run, node: str, port: str = "out") -> list[dict]:
    out = next(n for n in run.nodes if n.node == node).outputs[port]
    return list(ReadOnlyDataset(lab.storage.absolute(out["path"]), out["part"]))


def _splitmix(seed: int, row: int) -> float:
    """SplitMix64 written out with Python integers (independent of the numpy version in processors)."""
    mask = (1 << 64) - 1
    z = (row + seed * 0x9E3779B97F4A7C15) & mask
    z = (z * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


def test_uniform_is_splitmix64_of_seed_and_row():
    assert np.allclose(uniform(7, 1000, 50), [_splitmix(7, r) for r in range(1000, 1050)], rtol=0, atol=0)


def test_split_sample_shuffle_are_seeded_and_complete(lab, fruit):
    records = _records(300)
    fruit.add("plain", records)
    text = """\
version: 1
name: draws
nodes:
  raw: {type: dataset, dataset: plain}
  parts: {type: split, input: raw, ratios: {train: 0.7, val: 0.2, test: 0.1}, seed: 5}
  some: {type: sample, input: raw, fraction: 0.25, seed: 9}
  mixed: {type: shuffle, input: raw, seed: 3}
"""
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    bounds = [0.7, 0.9, 1.0]
    which = [next(k for k, b in enumerate(bounds) if _splitmix(5, i) < b) for i in range(300)]
    for k, port in enumerate(["train", "val", "test"]):
        assert _output(lab, run, "parts", port) == [r for r, w in zip(records, which, strict=True) if w == k]
    assert _output(lab, run, "some") == [r for i, r in enumerate(records) if _splitmix(9, i) < 0.25]
    order = sorted(range(300), key=lambda i: _splitmix(3, i))
    assert _output(lab, run, "mixed") == [records[i] for i in order]
    again = PipelineRunner(lab).run("p", text, fresh=True)
    assert _output(lab, again, "mixed") == _output(lab, run, "mixed")


def test_sql_over_two_named_inputs(lab, fruit):
    records = _records(40)
    fruit.add("plain", records)
    text = """\
version: 1
name: sql
nodes:
  raw: {type: dataset, dataset: plain}
  even: {type: select, input: raw, where: "CAST(substr(path, 3, 4) AS INTEGER) % 2 = 0"}
  counted:
    type: sql
    inputs: {a: raw, e: even}
    query: >-
      SELECT a.path, count(e.path) AS matches, octet_length(a.content) AS size
      FROM a LEFT JOIN e ON a.path = e.path GROUP BY a.path, a.content ORDER BY a.path
"""
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    assert _output(lab, run, "counted") == [
        {"path": r["path"], "matches": int(i % 2 == 0), "size": 3} for i, r in enumerate(records)
    ]
    even = next(n for n in run.nodes if n.node == "even")
    assert even.log.startswith("fused into the query of counted") and even.rows_out == 20


def test_a_fused_sql_reads_its_inputs_in_their_order(lab, fruit):
    records = _records(120)
    fruit.add("plain", records)
    text = """\
version: 1
name: sqlmix
nodes:
  raw:   {type: dataset, dataset: plain}
  mixed: {type: shuffle, input: raw, seed: 8}
  some:  {type: select, input: mixed, where: "CAST(substr(path, 3, 4) AS INTEGER) % 4 <> 0"}
  picked:
    type: sql
    inputs: {s: some}
    query: "SELECT path, upper(contentType) AS kind FROM s WHERE path LIKE '%1%' OR path LIKE '%7%'"
"""
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    assert {n.node: n.log.split(" (")[0] for n in run.nodes if n.node in ("mixed", "some")} == {
        "mixed": "fused into the query of picked",
        "some": "fused into the query of picked",
    }
    mixed = [records[i] for i in sorted(range(120), key=lambda i: _splitmix(8, i))]
    expected = [
        {"path": r["path"], "kind": "IMAGE/JPEG"}
        for r in mixed
        if int(r["path"][2:6]) % 4 and ("1" in r["path"] or "7" in r["path"])
    ]
    assert _output(lab, run, "picked") == expected
    kept = PipelineRunner(lab).run("p", text.replace("seed: 8}", "seed: 8, keep: true}"))  # written first
    assert _output(lab, kept, "picked") == expected


def test_parse_labelme_boxes_from_polygons(lab, fruit):
    rng = random.Random(4)
    records, expected = [], []
    for i in range(12):
        shapes = [
            {
                "label": rng.choice(["apple", "kiwi"]),
                "points": [[rng.uniform(0, 50), rng.uniform(0, 50)] for _ in range(3)],
            }
            for _ in range(rng.randint(0, 3))
        ]
        doc = {"imageWidth": 64 + i, "imageHeight": 48, "shapes": shapes}
        records.append(
            {"path": f"l/{i}.json", "contentType": "application/json", "content": json.dumps(doc).encode()}
        )
        boxes = [
            {
                "name": s["label"],
                "xmin": round(min(p[0] for p in s["points"])),
                "ymin": round(min(p[1] for p in s["points"])),
                "xmax": round(max(p[0] for p in s["points"])),
                "ymax": round(max(p[1] for p in s["points"])),
                "difficult": 0,
            }
            for s in shapes
        ]
        expected.append({**records[-1], "object": boxes, "width": 64 + i, "height": 48})
    fruit.add("labelme", records)
    text = "version: 1\nname: lm\nnodes:\n  raw: {type: dataset, dataset: labelme}\n  boxes: {type: parse_labelme, input: raw}\n"
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    assert _output(lab, run, "boxes") == expected


def test_label_id_leaves_null_labels_null(lab, fruit):
    fruit.add("fruit-classification", fruit.files("classification", 8))
    text = """\
version: 1
name: ids
nodes:
  raw: {type: dataset, dataset: fruit-classification}
  extract: {type: regex_extract, input: raw, field: path, pattern: '^Fruit/(?P<fruit>[^/]+)/[^/]+$'}
  ids: {type: label_id, input: extract, field: fruit, output: fruit_id}
"""
    run = PipelineRunner(lab).run("p", text)
    got = _output(lab, run, "ids")
    names = sorted({r["fruit"] for r in got if r["fruit"] is not None})
    assert [r["fruit_id"] for r in got] == [
        None if r["fruit"] is None else names.index(r["fruit"]) for r in got
    ]
    assert any(r["fruit_id"] is None for r in got)


def test_parse_coco_one_image_document_per_record(lab, fruit):
    rng = random.Random(8)
    categories = [{"id": 1, "name": "apple"}, {"id": 2, "name": "kiwi"}]
    records, expected = [], []
    for i in range(10):
        anns = [
            {
                "bbox": [rng.uniform(0, 40), rng.uniform(0, 40), rng.uniform(1, 20), rng.uniform(1, 20)],
                "category_id": rng.choice([1, 2]),
                "iscrowd": rng.choice([0, 1]),
            }
            for _ in range(rng.randint(0, 3))
        ]
        doc = {
            "images": [{"id": i, "width": 80, "height": 60 + i}],
            "annotations": anns,
            "categories": categories,
        }
        records.append(
            {"path": f"c/{i}.json", "contentType": "application/json", "content": json.dumps(doc).encode()}
        )
        boxes = [
            {
                "name": {1: "apple", 2: "kiwi"}[a["category_id"]],
                "xmin": round(a["bbox"][0]),
                "ymin": round(a["bbox"][1]),
                "xmax": round(a["bbox"][0] + a["bbox"][2]),
                "ymax": round(a["bbox"][1] + a["bbox"][3]),
                "difficult": a["iscrowd"],
            }
            for a in anns
        ]
        expected.append({**records[-1], "object": boxes, "width": 80, "height": 60 + i})
    fruit.add("coco", records)
    text = "version: 1\nname: cc\nnodes:\n  raw: {type: dataset, dataset: coco}\n  boxes: {type: parse_coco, input: raw}\n"
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    assert _output(lab, run, "boxes") == expected

    two = {"images": [{"id": 1}, {"id": 2}], "annotations": [], "categories": []}
    fruit.add(
        "coco", [{"path": "c/x.json", "contentType": "application/json", "content": json.dumps(two).encode()}]
    )
    failed = PipelineRunner(lab).run("p", text)
    boxes = next(n for n in failed.nodes if n.node == "boxes")
    assert failed.state == "failed" and "record 0: holds 2 images" in boxes.log


def _fusion_files(seed: int) -> list[dict]:
    rng = random.Random(seed)
    files = []
    for i in range(40):
        files.append({"path": f"A/img/{i}.jpg", "contentType": "image/jpeg", "content": rng.randbytes(5)})
        for k in range(i % 3):  # none, one or two labels per image: a join row per match
            files.append({"path": f"B/lab/{i}.txt", "contentType": f"c{(i + k) % 4}", "content": b"%d" % k})
    files += [{"path": "README", "contentType": "text/plain", "content": b"no match"}]
    rng.shuffle(files)
    return files


def test_fused_chains_match_record_by_record_computations(lab, fruit):
    """The engine's regex (an unnamed group; one after a select), joins with many matches, ids."""
    files = _fusion_files(3)
    fruit.add("mixed", files)
    text = r"""
version: 1
name: fused
nodes:
  raw:    {type: dataset, dataset: mixed}
  ext:    {type: regex_extract, input: raw, field: path, pattern: '^(\w)/(?P<kind>[^/]+)/(?P<id>[^/.]+)\.(jpg|txt)$'}
  imgs:   {type: select, input: ext, where: "kind = 'img'"}
  labs:   {type: select, input: raw, where: "path LIKE 'B/%'"}
  labx:   {type: regex_extract, input: labs, field: path, pattern: '/(?P<id>\d+)\.'}
  named:  {type: rename, input: labx, fields: {contentType: label, content: note, path: lpath}}
  joined: {type: left_join, left: imgs, right: named, on: id, fields: [label, note]}
  ids:    {type: label_id, input: joined, field: label, output: label_id}
"""
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.state, n.log) for n in run.nodes]
    pattern = re.compile(r"^(\w)/(?P<kind>[^/]+)/(?P<id>[^/.]+)\.(jpg|txt)$")
    images = []
    for r in files:
        m = pattern.search(r["path"])
        if m and m["kind"] == "img":
            images.append({**r, "kind": m["kind"], "id": m["id"]})
    labels = [
        (re.search(r"/(?P<id>\d+)\.", r["path"])["id"], r["contentType"], r["content"])
        for r in files
        if r["path"].startswith("B/")
    ]
    expected = []
    for image in images:
        matches = [(label, note) for id_, label, note in labels if id_ == image["id"]] or [(None, None)]
        expected += [{**image, "label": label, "note": note} for label, note in matches]
    names = sorted({r["label"] for r in expected if r["label"] is not None})
    expected = [{**r, "label_id": None if r["label"] is None else names.index(r["label"])} for r in expected]
    assert _output(lab, run, "ids") == expected
    rows = {n.node: (n.rows_in, n.rows_out) for n in run.nodes}
    assert rows["imgs"] == (len(files), len(images)) and rows["labs"][1] == len(labels)
    assert rows["joined"] == (len(images) + len(labels), len(expected))


@pytest.mark.parametrize("blob", [0, 1 << 20], ids=["small", "blobs"])
def test_stored_content_does_not_depend_on_how_the_engine_cuts_batches(tmp_path, blob):
    rows = 10_000 if not blob else 60  # blobs: 60 MiB, cut by BATCH_BYTES rather than BATCH_ROWS
    table = pa.table(
        {
            "path": [f"d/{i}.jpg" for i in range(rows)],
            "note": [None if i % 3 else str(i).encode() * (1 + blob // 8) for i in range(rows)],
            "object": [None if i % 4 == 0 else [{"name": "kiwi", "xmin": i}] * (i % 3) for i in range(rows)],
        }
    )
    cuts = {
        "stored": table.to_batches(max_chunksize=processors.BATCH_ROWS),
        "small": table.to_batches(max_chunksize=7),
        "slices": [
            table.slice(0, rows // 2).to_batches()[0],
            *table.slice(rows // 2).to_batches(max_chunksize=3)[:1],
            *table.slice(rows // 2 + 3).to_batches(),
        ],
    }
    contents = set()
    for name, batches in cuts.items():
        folder = tmp_path / name
        written = processors.write(
            {"out": table.schema},
            folder,
            threading.Event(),
            lambda sinks, b=batches: [sinks["out"].write(x) for x in b],
        )
        assert written == {"out": rows}
        stored = list(ReadOnlyDataset(folder / "out").iter_batches())
        assert pa.Table.from_batches(stored).column("path").to_pylist() == table.column("path").to_pylist()
        assert max(b.nbytes for b in stored) < processors.BATCH_BYTES + 2 * max(blob, 1 << 16)
        contents.add(cache.content(folder / "out"))
    assert len(contents) == 1


def test_a_fused_shuffle_keeps_its_seeded_order(lab, fruit):
    # shuffle runs in the query of the node reading it: a record's draw is SplitMix64 of the seed
    # and its row in the shuffle's input as it would have been written, whichever way it is fused
    records = _records(200)
    fruit.add("plain", records)
    text = """\
version: 1
name: mix
nodes:
  raw:   {type: dataset, dataset: plain}
  some:  {type: select, input: raw, where: "CAST(substr(path, 3, 4) AS INTEGER) % 3 <> 0"}
  mixed: {type: shuffle, input: some, seed: 11}
  late:  {type: select, input: mixed, where: "CAST(substr(path, 3, 4) AS INTEGER) % 2 = 0"}
  first: {type: shuffle, input: raw, seed: 4}
  named: {type: rename, input: first, fields: {contentType: kind}}
"""
    run = PipelineRunner(lab).run("p", text)
    assert run.state == "succeeded", [(n.node, n.log) for n in run.nodes]
    states = {n.node: n.log for n in run.nodes}
    assert states["mixed"].startswith("fused into") and states["first"].startswith("fused into")
    some = [r for r in records if int(r["path"][2:6]) % 3]
    mixed = [some[i] for i in sorted(range(len(some)), key=lambda i: _splitmix(11, i))]
    assert _output(lab, run, "late") == [r for r in mixed if int(r["path"][2:6]) % 2 == 0]
    first = [records[i] for i in sorted(range(200), key=lambda i: _splitmix(4, i))]
    assert _output(lab, run, "named") == [
        {"path": r["path"], "kind": r["contentType"], "content": r["content"]} for r in first
    ]
    rows = {n.node: n.rows_out for n in run.nodes}
    assert rows["mixed"] == len(some) and rows["first"] == 200

    kept = PipelineRunner(lab).run("p", text.replace("seed: 11}", "seed: 11, keep: true}"))  # written
    assert _output(lab, kept, "mixed") == mixed
    assert _output(lab, kept, "late") == _output(lab, run, "late")
