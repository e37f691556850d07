"""VOC, COCO, labelme and ImageFolder trees (folders and archives) become the seed's record shapes."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import zipfile
import zlib

import pytest

from kpl_dataset import BasicType, ReadOnlyDataset, list_parts
from kpl_dataset.cli import main
from kpl_dataset.importers import ImportFailed, import_imagefolder, parse_split


def png(width: int, height: int, rgb=(255, 0, 0)) -> bytes:
    """Return a valid PNG of one colour, written with zlib and struct only."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def write_tree(root, files):
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return root


def zip_tree(root, target):
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(root.parent).as_posix())
    return target


def run(argv, capsys):
    code = main(["-q", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def records(dest, part=None):
    with ReadOnlyDataset(str(dest), part) as reader:
        return list(reader)


# --- Pascal VOC ------------------------------------------------------------------------

VOC_XML = """<annotation>
  <folder>fruit</folder>
  <filename>{filename}</filename>
  <size><width>4</width><height>3</height><depth>3</depth></size>
  <object><name>苹果</name><difficult>0</difficult>
    <bndbox><xmin>0</xmin><ymin>1</ymin><xmax>3</xmax><ymax>2</ymax></bndbox></object>
  <object><name>kiwi</name><difficult>1</difficult>
    <bndbox><xmin>1.4</xmin><ymin>0.6</ymin><xmax>2</xmax><ymax>3</ymax></bndbox></object>
</annotation>"""


@pytest.fixture
def voc_tree(tmp_path):
    return write_tree(
        tmp_path / "fruit",
        {
            "JPEGImages/苹果_01.png": png(4, 3),
            "JPEGImages/no_filename.png": png(2, 2),
            "Annotations/苹果_01.xml": VOC_XML.format(filename="苹果_01.png"),
            "Annotations/no_filename.xml": "<annotation><object><name>x</name>"
            "<bndbox><xmin>0</xmin><ymin>0</ymin><xmax>1</xmax><ymax>1</ymax></bndbox></object></annotation>",
            "ImageSets/Main/train.txt": "苹果_01\n",
        },
    )


@pytest.mark.parametrize("as_zip", [False, True])
def test_voc(tmp_path, capsys, voc_tree, as_zip):
    src = zip_tree(voc_tree, tmp_path / "voc.zip") if as_zip else voc_tree
    dest = tmp_path / "ds"
    code, out, err = run(["voc", src, dest], capsys)
    assert code == 0, err
    assert "part 'root': 2 records" in out
    with ReadOnlyDataset(str(dest), None) as reader:
        assert reader.schema["object"] == [
            {
                "name": BasicType.String,
                "xmin": BasicType.Int,
                "ymin": BasicType.Int,
                "xmax": BasicType.Int,
                "ymax": BasicType.Int,
                "difficult": BasicType.Int,
            }
        ]
        got = {r["path"]: r for r in reader}
    prefix = "fruit/" if as_zip else ""
    apple = got[prefix + "JPEGImages/苹果_01.png"]
    assert apple["contentType"] == "image/png"
    assert apple["content"] == png(4, 3)
    assert (apple["width"], apple["height"]) == (4, 3)
    assert apple["object"] == [
        {"name": "苹果", "xmin": 0, "ymin": 1, "xmax": 3, "ymax": 2, "difficult": 0},
        {"name": "kiwi", "xmin": 1, "ymin": 1, "xmax": 2, "ymax": 3, "difficult": 1},
    ]
    # No <filename>: the image with the annotation's stem is used; no <size>: 0.
    other = got[prefix + "JPEGImages/no_filename.png"]
    assert other["object"][0]["name"] == "x" and other["width"] == 0


def test_voc_errors_name_file_and_field(tmp_path, capsys, voc_tree):
    (voc_tree / "Annotations" / "bad.xml").write_text(
        "<annotation><filename>bad.png</filename><object><name>a</name>"
        "<bndbox><xmin>one</xmin><ymin>0</ymin><xmax>1</xmax><ymax>1</ymax></bndbox></object></annotation>"
    )
    (voc_tree / "JPEGImages" / "bad.png").write_bytes(png(1, 1))
    code, _, err = run(["voc", voc_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "Annotations/bad.xml: object 0: <xmin> 'one' is not a number" in err
    assert not (tmp_path / "ds").exists()

    (voc_tree / "Annotations" / "bad.xml").write_text(VOC_XML.format(filename="missing.png"))
    (voc_tree / "JPEGImages" / "bad.png").unlink()
    code, _, err = run(["voc", voc_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "Annotations/bad.xml: image JPEGImages/missing.png not found" in err


def test_voc_refuses_entities(tmp_path, capsys, voc_tree):
    (voc_tree / "Annotations" / "lol.xml").write_text(
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">]><annotation>&lol;</annotation>'
    )
    code, _, err = run(["voc", voc_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "'Annotations/lol.xml': XML with a DTD or entities refused" in err


def test_voc_needs_annotations(tmp_path, capsys):
    src = write_tree(tmp_path / "x", {"a.png": png(1, 1)})
    code, _, err = run(["voc", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "no Annotations/*.xml found" in err


# --- COCO ------------------------------------------------------------------------------


def coco_doc(split):
    return {
        "images": [
            {"id": 1, "file_name": "a.png", "width": 4, "height": 3},
            {"id": 2, "file_name": "b.png", "width": 2, "height": 2},
        ],
        "annotations": [
            {
                "id": 10,
                "image_id": 1,
                "category_id": 7,
                "bbox": [0.5, 1, 2.2, 1.4],
                "iscrowd": 0,
                "segmentation": [[0.5, 1, 2.7, 1, 2.7, 2.4]],
            },
            {
                "id": 11,
                "image_id": 1,
                "category_id": 3,
                "bbox": [1, 1, 1, 1],
                "iscrowd": 1,
                "segmentation": {"counts": [1, 2], "size": [3, 4]},
            },
        ],
        "categories": [{"id": 3, "name": "猫"}, {"id": 7, "name": "dog"}],
    }


@pytest.fixture
def coco_tree(tmp_path):
    return write_tree(
        tmp_path / "coco",
        {
            "annotations/instances_val2017.json": json.dumps(coco_doc("val2017")),
            "val2017/a.png": png(4, 3),
            "val2017/b.png": png(2, 2),
        },
    )


@pytest.mark.parametrize("as_zip", [False, True])
def test_coco(tmp_path, capsys, coco_tree, as_zip):
    src = zip_tree(coco_tree, tmp_path / "coco.zip") if as_zip else coco_tree
    dest = tmp_path / "ds"
    code, _, err = run(["coco", src, dest], capsys)
    assert code == 0, err
    got = records(dest)
    prefix = "coco/" if as_zip else ""
    assert [r["path"] for r in got] == [prefix + "val2017/a.png", prefix + "val2017/b.png"]
    a, b = got
    assert a["content"] == png(4, 3) and a["contentType"] == "image/png"
    assert (a["width"], a["height"]) == (4, 3)
    assert a["object"] == [
        {
            "name": "dog",
            "category_id": 7,
            "xmin": 0,
            "ymin": 1,
            "xmax": 3,
            "ymax": 2,
            "difficult": 0,
            "segmentation": [[0.5, 1.0, 2.7, 1.0, 2.7, 2.4]],
        },
        {
            "name": "猫",
            "category_id": 3,
            "xmin": 1,
            "ymin": 1,
            "xmax": 2,
            "ymax": 2,
            "difficult": 1,
            "segmentation": [],
        },
    ]
    assert b["object"] == []


def test_coco_two_splits_become_two_parts(tmp_path, capsys, coco_tree):
    write_tree(
        coco_tree,
        {
            "annotations/instances_train2017.json": json.dumps(coco_doc("train2017")),
            "train2017/a.png": png(1, 1),
            "train2017/b.png": png(1, 1),
        },
    )
    dest = tmp_path / "ds"
    code, out, err = run(["coco", coco_tree, dest], capsys)
    assert code == 0, err
    assert list_parts(str(dest)) == ["train2017", "val2017"]
    assert [r["path"] for r in records(dest, "train2017")] == ["train2017/a.png", "train2017/b.png"]


def test_coco_errors(tmp_path, capsys, coco_tree):
    doc = coco_doc("val")
    doc["annotations"][1]["bbox"] = [1, 2]
    (coco_tree / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    code, _, err = run(["coco", coco_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "annotations/instances_val2017.json: annotations[1]: bbox must be four numbers" in err

    doc = coco_doc("val")
    doc["images"][1]["file_name"] = "zzz.png"
    (coco_tree / "annotations" / "instances_val2017.json").write_text(json.dumps(doc))
    code, _, err = run(["coco", coco_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "images[1]: image 'zzz.png' not found" in err

    (coco_tree / "annotations" / "instances_val2017.json").write_text('{"images": [')
    code, _, err = run(["coco", coco_tree, tmp_path / "ds"], capsys)
    assert code == 2
    assert "annotations/instances_val2017.json: bad JSON" in err
    assert not (tmp_path / "ds").exists()


# --- labelme ---------------------------------------------------------------------------


def labelme_doc(image_path, shapes, image_data=None):
    return json.dumps(
        {
            "version": "5.2.1",
            "shapes": shapes,
            "imagePath": image_path,
            "imageData": image_data,
            "imageHeight": 3,
            "imageWidth": 4,
        }
    )


def test_labelme(tmp_path, capsys):
    shapes = [
        {"label": "猫", "points": [[0.4, 0.6], [3.2, 2.5]], "shape_type": "rectangle", "flags": {}},
        {"label": "tail", "points": [[1, 1], [2, 1], [2, 2.6]], "shape_type": "polygon"},
        {"label": "eye", "points": [[2, 2], [3, 2]], "shape_type": "circle"},
    ]
    inline = base64.b64encode(png(2, 2)).decode()
    src = write_tree(
        tmp_path / "标注",
        {
            "images/猫.png": png(4, 3),
            "json/猫.json": labelme_doc("..\\images\\猫.png", shapes),
            "json/inline.json": labelme_doc("inline.png", shapes[:1], inline),
            "json/other.json": "[1, 2]",  # not labelme: skipped
        },
    )
    dest = tmp_path / "ds"
    code, out, err = run(["labelme", zip_tree(src, tmp_path / "lm.zip"), dest], capsys)
    assert code == 0, err
    got = {r["path"]: r for r in records(dest)}
    assert sorted(got) == ["标注/images/猫.png", "标注/json/inline.png"]
    cat = got["标注/images/猫.png"]
    assert cat["content"] == png(4, 3) and (cat["width"], cat["height"]) == (4, 3)
    assert [
        (o["name"], o["shape_type"], o["xmin"], o["ymin"], o["xmax"], o["ymax"]) for o in cat["object"]
    ] == [
        ("猫", "rectangle", 0, 1, 3, 2),
        ("tail", "polygon", 1, 1, 2, 3),
        ("eye", "circle", 1, 1, 3, 3),
    ]
    assert cat["object"][1]["points"] == [[1.0, 1.0], [2.0, 1.0], [2.0, 2.6]]
    assert got["标注/json/inline.png"]["content"] == png(2, 2)


def test_labelme_refuses_image_outside_and_bad_points(tmp_path, capsys):
    src = write_tree(tmp_path / "lm", {"a.json": labelme_doc("../../etc/passwd", [])})
    code, _, err = run(["labelme", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "imagePath '../../etc/passwd' points outside the upload" in err

    src = write_tree(
        tmp_path / "lm2",
        {"a.png": png(1, 1), "a.json": labelme_doc("a.png", [{"label": "x", "points": [[1, "y"]]}])},
    )
    code, _, err = run(["labelme", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "a.json: shapes[0]: points[0] must be [x, y]" in err
    assert not (tmp_path / "ds").exists()


# --- ImageFolder -----------------------------------------------------------------------


@pytest.fixture
def image_tree(tmp_path):
    files = {f"Fruit/apple/{i}.png": png(1, 1, (i, 0, 0)) for i in range(6)}
    files.update({f"Fruit/猕猴桃/{i}.png": png(1, 1, (0, i, 0)) for i in range(4)})
    files.update(
        {"Fruit/banana/x.jpg": png(1, 1), "Fruit/README.txt": "not an image", "Fruit/loose.png": png(1, 1)}
    )
    return write_tree(tmp_path / "src", files) / "Fruit"


@pytest.mark.parametrize("as_zip", [False, True])
def test_imagefolder(tmp_path, capsys, image_tree, as_zip):
    src = zip_tree(image_tree, tmp_path / "fruit.zip") if as_zip else image_tree
    dest = tmp_path / "ds"
    code, _, err = run(["imagefolder", src, dest], capsys)
    assert code == 0, err
    got = records(dest)
    assert len(got) == 11
    classes = {(r["class_name"], r["class_id"]) for r in got}
    assert classes == {("apple", 0), ("banana", 1), ("猕猴桃", 2)}
    first = next(r for r in got if r["path"].endswith("apple/3.png"))
    assert first["file_name"] == "3" and first["content"] == png(1, 1, (3, 0, 0))
    assert first["contentType"] == "image/png"
    with ReadOnlyDataset(str(dest), None) as reader:
        assert reader.get_meta_db().get("classes") == ["apple", "banana", "猕猴桃"]


def test_imagefolder_split_is_stratified_and_deterministic(tmp_path, capsys, image_tree):
    parts = []
    for i, seed in enumerate([1, 1, 2]):
        dest = tmp_path / f"ds{i}"
        code, _, err = run(["imagefolder", image_tree, dest, "--split", "test=0.5", "--seed", seed], capsys)
        assert code == 0, err
        assert list_parts(str(dest)) == ["test", "train"]
        parts.append({p: sorted(r["path"] for r in records(dest, p)) for p in ("train", "test")})
    assert parts[0] == parts[1]
    assert parts[0] != parts[2]
    test = parts[0]["test"]
    classes = [p.split("/")[-2] for p in test]
    assert classes.count("apple") == 3 and classes.count("猕猴桃") == 2 and classes.count("banana") in (0, 1)
    assert set(parts[0]["train"]).isdisjoint(test)
    assert len(parts[0]["train"]) + len(test) == 11


def test_parse_split():
    assert parse_split("test=0.2") == {"test": 0.2}
    assert parse_split("val=0.1,test=0.2") == {"val": 0.1, "test": 0.2}
    for bad in ["test", "test=2", "train=0.1", "a=0.6,b=0.5", "test=x"]:
        with pytest.raises(ImportFailed, match="--split"):
            parse_split(bad)


def test_imagefolder_without_classes(tmp_path, capsys):
    src = write_tree(tmp_path / "flat", {"a.png": png(1, 1)})
    code, _, err = run(["imagefolder", src, tmp_path / "ds"], capsys)
    assert code == 2
    assert "no images in class folders" in err


def test_imagefolder_part_and_split_conflict(tmp_path, image_tree):
    with pytest.raises(ImportFailed, match="--part and --split"):
        import_imagefolder(image_tree, tmp_path / "ds", part="x", split={"test": 0.5})


def test_converter_into_existing_dataset_adds_a_part(tmp_path, capsys, image_tree, voc_tree):
    dest = tmp_path / "ds"
    assert run(["imagefolder", image_tree, dest], capsys)[0] == 0
    assert run(["voc", voc_tree, dest, "--part", "voc"], capsys)[0] == 0
    assert list_parts(str(dest)) == ["root", "voc"]
    shutil.rmtree(voc_tree / "JPEGImages")
    code, _, err = run(["voc", voc_tree, dest, "--part", "again"], capsys)
    assert code == 2 and "not found" in err
    assert list_parts(str(dest)) == ["root", "voc"]
