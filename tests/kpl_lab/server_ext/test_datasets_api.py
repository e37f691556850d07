"""Datasets over HTTP: upload and import, browse, pages, fields, thumbnails, stats, delete, errors."""

import io
import stat
import zipfile

from PIL import Image

from .conftest import UPLOAD_LIMIT, imagefolder_zip, png, zip_bytes

VOC_XML = """<annotation><filename>{name}.jpg</filename><size><width>8</width><height>6</height></size>
<object><name>{label}</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>4</ymax></bndbox></object>
</annotation>"""


def jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 6), (0, 0, 200)).save(out, format="JPEG")
    return out.getvalue()


async def upload_pets(api, **params):
    code, body = await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder", **params)
    assert code == 201, body
    return body


async def test_upload_imagefolder_answers_the_version_and_lists_it(api):
    version = await upload_pets(api, description="cats and dogs")
    assert (version["name"], version["record_count"], version["parts"]) == ("pets", 5, {"root": 5})

    code, listed = await api.get("datasets")
    assert code == 200 and [d["name"] for d in listed["datasets"]] == ["pets"]
    assert [d["name"] for d in (await api.get("datasets", q="DOGS"))[1]["datasets"]] == ["pets"]
    assert (await api.get("datasets", q="birds"))[1]["datasets"] == []

    code, shown = await api.get("datasets/pets")
    assert code == 200 and [v["version"] for v in shown["versions"]] == [version["version"]]

    code, detail = await api.get(f"datasets/pets/versions/{version['version'][:6]}")
    assert code == 200 and detail["ref"] == version["ref"]
    assert detail["schemas"]["root"]["class_name"] == "String"


async def test_records_page_projects_fields_and_references_bytes(api, kpl_home):
    version = (await upload_pets(api))["version"]
    code, page = await api.get(f"datasets/pets/versions/{version}/records", offset=3, limit=10)
    assert code == 200, page
    assert (page["total"], page["offset"], [r["index"] for r in page["records"]]) == (5, 3, [3, 4])
    content = page["records"][0]["fields"]["content"]
    assert content["contentType"] == "image/png" and content["$bytes"] == len(png(40, 30, (10, 0, 10)))
    assert page["records"][0]["fields"]["class_name"] == "dog"

    code, page = await api.get(
        f"datasets/pets/versions/{version}/records", columns="class_name,class_id", limit=2
    )
    assert code == 200 and page["columns"] == ["class_name", "class_id"]
    assert page["records"][0]["fields"] == {"class_name": "cat", "class_id": 0}

    raw = await api.raw("GET", content["url"].split("/kpl/api/", 1)[1].split("?")[0], part="root")
    assert raw.code == 200 and raw.headers["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(raw.body)).size == (40, 30)

    thumb = await api.raw("GET", f"datasets/pets/versions/{version}/records/3/fields/content", thumbnail=16)
    assert thumb.code == 200 and thumb.headers["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(thumb.body)).size == (16, 12)
    cached = list((kpl_home / "storage" / "cache").rglob("thumbnails/*.png"))
    assert len(cached) == 1 and cached[0].read_bytes() == thumb.body
    again = await api.raw("GET", f"datasets/pets/versions/{version}/records/3/fields/content", thumbnail=16)
    assert again.body == thumb.body

    code, value = await api.get(f"datasets/pets/versions/{version}/records/4/fields/class_name")
    assert (code, value) == (200, "dog")


async def test_stats_count_fields_and_classes_once_per_version(api, kpl_home):
    version = (await upload_pets(api))["version"]
    code, stats = await api.get(f"datasets/pets/versions/{version}/stats")
    assert code == 200, stats
    assert stats["records"] == 5 and stats["class_field"] == "class_name"
    assert stats["classes"] == {"cat": 3, "dog": 2}
    assert stats["fields"]["class_id"] | {} == {
        "type": "Int",
        "count": 5,
        "min": 0,
        "max": 1,
        "mean": 0.4,
        "distinct": None,
        "distinct_capped": False,
        "total_bytes": None,
    }
    assert stats["fields"]["class_name"]["distinct"] == 2
    assert stats["fields"]["content"]["total_bytes"] > 0
    assert list((kpl_home / "storage" / "cache").rglob("stats.2.root.json"))


async def test_voc_objects_pass_through_and_count_as_classes(api):
    files = {}
    for i, label in enumerate(["car", "car", "person"]):
        files[f"VOC/JPEGImages/{i}.jpg"] = jpeg()
        files[f"VOC/Annotations/{i}.xml"] = VOC_XML.format(name=i, label=label).encode()
    code, version = await api.upload("datasets", zip_bytes(files), name="street", format="voc")
    assert code == 201, version
    code, page = await api.get(f"datasets/street/versions/{version['version']}/records", limit=1)
    record = page["records"][0]["fields"]
    assert record["object"][0]["name"] in ("car", "person")
    assert {k: record["object"][0][k] for k in ("xmin", "ymin", "xmax", "ymax")} == {
        "xmin": 1,
        "ymin": 1,
        "xmax": 5,
        "ymax": 4,
    }
    assert record["content"]["contentType"] == "image/jpeg"
    code, stats = await api.get(f"datasets/street/versions/{version['version']}/stats")
    assert (stats["class_field"], stats["classes"]) == ("object.name", {"car": 2, "person": 1})
    assert stats["fields"]["object"]["mean"] == 1.0 and stats["fields"]["object.xmin"]["count"] == 3


async def test_raw_import_serves_active_content_as_plain_text(api):
    files = {"page.html": b"<script>alert(1)</script>", "notes.txt": b"hello"}
    code, version = await api.upload("datasets", zip_bytes(files), name="docs")
    assert code == 201, version
    _, page = await api.get(f"datasets/docs/versions/{version['version']}/records")
    by_path = {r["fields"]["path"]: r for r in page["records"]}
    assert by_path["page.html"]["fields"]["content"]["thumbnail"] is None
    index = by_path["page.html"]["index"]
    raw = await api.raw("GET", f"datasets/docs/versions/{version['version']}/records/{index}/fields/content")
    assert raw.headers["Content-Type"].startswith("text/plain") and raw.body == files["page.html"]
    code, error = await api.get(
        f"datasets/docs/versions/{version['version']}/records/{index}/fields/content", thumbnail=64
    )
    assert code == 400 and error["field"] == "thumbnail"


async def test_delete_version_and_dataset(api, kpl_home):
    version = (await upload_pets(api))["version"]
    await api.get(f"datasets/pets/versions/{version}/stats")
    code, deleted = await api.delete(f"datasets/pets/versions/{version}")
    assert (code, deleted) == (200, {"deleted": [f"pets:{version}"]})
    assert (await api.get("datasets/pets"))[0] == 404
    assert not list((kpl_home / "storage" / "cache").rglob("stats.2.root.json"))
    await upload_pets(api)
    code, deleted = await api.delete("datasets/pets")
    assert code == 200 and len(deleted["deleted"]) == 1
    assert (await api.get("datasets"))[1] == {"datasets": []}


async def test_bad_requests_name_the_field(api):
    version = (await upload_pets(api))["version"]
    base = f"datasets/pets/versions/{version}"
    cases = [
        (await api.get(f"{base}/records", offset="x"), 400, "offset"),
        (await api.get(f"{base}/records", limit=0), 400, "limit"),
        (await api.get(f"{base}/records", columns="nope"), 400, "columns"),
        (await api.get(f"{base}/records", part="nope"), 404, None),
        (await api.get(f"{base}/records/99/fields/content"), 404, None),
        (await api.get(f"{base}/records/0/fields/nope"), 404, None),
        (await api.get(f"{base}/records/0/fields/content", thumbnail=4), 400, "thumbnail"),
        (await api.get("datasets/pets/versions/ffffffff"), 404, None),
        (await api.get("datasets/pets/versions/bad name"), 400, "version"),
        (await api.upload("datasets", imagefolder_zip()), 400, "name"),
        (await api.upload("datasets", imagefolder_zip(), name="x", format="pdf"), 400, "format"),
        (await api.upload("datasets", imagefolder_zip(), name="x", split="test=0.5"), 400, "split"),
        (
            await api.upload(
                "datasets", imagefolder_zip(), name="x", format="imagefolder", split="test=0.5", part="p"
            ),
            400,
            "split",
        ),
        (await api.upload("datasets", imagefolder_zip(), name="chats_é"), 400, "name"),
        (await api.upload("datasets", imagefolder_zip(), name="../x"), 400, "name"),
        (await api.upload("datasets", b"", name="x"), 400, "body"),
        (await api.upload("datasets", b"just text", name="x"), 400, "body"),
    ]
    for (code, body), status, field in cases:
        assert (code, body["field"]) == (status, field), body
        assert body["message"] and body["error"]


async def test_hostile_uploads_are_refused_and_leave_no_dataset(api, kpl_home):
    traversal = zip_bytes({"../evil.txt": b"x", "ok.txt": b"y"})
    link = io.BytesIO()
    with zipfile.ZipFile(link, "w") as archive:
        info = zipfile.ZipInfo("passwd")
        info.create_system = 3
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.bin", b"\0" * (8 << 20))
    for data, entry, words in (
        (traversal, "../evil.txt", "path traversal"),
        (link.getvalue(), "passwd", "symbolic link"),
        (bomb.getvalue(), "zeros.bin", "zip bomb"),
    ):
        code, body = await api.upload("datasets", data, name="hostile", filename="hostile.zip")
        assert (code, body["field"]) == (400, "body"), body
        assert words in body["message"] and entry in body["message"]
        assert str(kpl_home) not in body["message"]  # no server paths leak
    assert (await api.get("datasets/hostile"))[0] == 404
    assert not list((kpl_home / "storage").rglob("hostile"))
    assert not any((kpl_home / "uploads").iterdir())  # temporary files removed


async def test_upload_over_the_limit_is_refused(api):
    code, body = await api.upload("datasets", b"\0" * (UPLOAD_LIMIT + 1), name="big")
    assert (code, body["field"]) == (400, "body") and "limit" in body["message"]


async def test_projects_are_isolated(api):
    await upload_pets(api)
    assert (await api.get("datasets/pets", project="other"))[0] == 404
    assert (await api.get("datasets", project="other"))[1] == {"datasets": []}
    code, body = await api.get("datasets", project="secret")
    assert (code, body["field"]) == (403, "project")
    code, body = await api.upload("datasets", imagefolder_zip(), name="pets", project="secret")
    assert code == 403


async def test_requests_without_the_token_are_refused(api):
    response = await api.raw("GET", "datasets", headers={"Authorization": ""})
    assert response.code == 403
    response = await api.raw("POST", "datasets", imagefolder_zip(), headers={"Authorization": ""}, name="x")
    assert response.code == 403
