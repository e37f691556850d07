"""Hostile field names, parts and record indexes: 400 or 404, never 500, nothing read outside the cache."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from tornado.httpclient import HTTPClientError

from .conftest import imagefolder_zip, png, zip_bytes

CANARY = b"\x89PNG\r\n\x1a\nCANARY-outside-the-cache"

HOSTILE_FIELDS = [
    "..",
    "../..",
    "../../../../../../../../canary",
    "a/../../../../../../../../../canary",
    "content/../../../../../../../canary",
    "content/../content",
    "/etc/passwd",
    "content\x00",
    "\x00",
    "content.\x00.png",
    "x" * 5000,
    "content." + "0" * 5000,
    "content.²",
    "content.٣",
    "ünïcødé",
    "内容",
    "😀",
    "%2e%2e",
    "content..0",
    ".content",
    " ",
    "content%00",
]
HOSTILE_PARTS = ["..", "../other", "root/../..", "root%00", "x" * 5000, "ünï", "/root", "root/"]


@pytest.fixture
def raw_get(http_server_client, jp_base_url, jp_auth_header):
    """GET a path whose segments are sent exactly as given (already percent-encoded)."""

    async def get(path: str, **params: str):
        url = f"{jp_base_url.rstrip('/')}/kpl/api/{path}?{urlencode(params)}"
        try:
            return await http_server_client.fetch(url, headers=jp_auth_header, raise_error=False)
        except HTTPClientError as error:  # pragma: no cover - raise_error=False answers every status
            return error.response

    return get


def plant_canaries(kpl_home, version: str) -> list:
    """Put canary files where an unchecked path could reach: the storage root and the other project."""
    storage = kpl_home / "storage"
    version_cache = storage / "cache" / "projects" / "default" / "datasets" / "pets" / version
    places = [
        storage / "canary",
        storage / "canary.16.png",
        storage / "cache" / "canary.16.png",
        version_cache / "canary.16.png",
        version_cache / "thumbnails" / "canary.16.png",
        version_cache / "thumbnails" / "root" / "canary.16.png",
    ]
    for place in places:
        place.parent.mkdir(parents=True, exist_ok=True)
        place.write_bytes(CANARY)
    return places


async def test_hostile_fields_and_parts_answer_400_or_404_and_read_nothing_outside(api, kpl_home, raw_get):
    code, mine = await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder")
    assert code == 201, mine
    their_images = {f"bird/{i}.png": png(24, 24, color=(7, 7 + i, 250)) for i in range(5)}
    code, theirs = await api.upload(
        "datasets", zip_bytes(their_images), name="pets", format="imagefolder", project="other"
    )
    assert code == 201, theirs
    version = mine["version"]
    base = f"datasets/pets/versions/{version}/records"
    # real thumbnails in both projects' caches: the other project's must stay out of reach too
    for project in ("default", "other"):
        thumb = await raw_get(
            f"{base if project == 'default' else base.replace(version, theirs['version'])}/3/fields/content",
            thumbnail="16",
            project=project,
        )
        assert thumb.code == 200
    other_thumbnails = [
        p.read_bytes() for p in (kpl_home / "storage" / "cache" / "projects" / "other").rglob("*.png")
    ]
    assert other_thumbnails
    plant_canaries(kpl_home, version)

    answers = []
    for field in HOSTILE_FIELDS:
        for params in ({}, {"thumbnail": "16"}):
            answers.append(
                (field, params, await raw_get(f"{base}/3/fields/{quote(field, safe='')}", **params))
            )
    for part in HOSTILE_PARTS:
        for params in ({"part": part}, {"part": part, "thumbnail": "16"}):
            answers.append(("content", params, await raw_get(f"{base}/3/fields/content", **params)))
    for index in ("9" * 5000, "99999999999999999999", "0" * 30 + "3"):
        answers.append((index, {}, await raw_get(f"{base}/{index}/fields/content", thumbnail="16")))
    # another project's version through this project: not found, and its cache is never served
    answers.append(
        (
            "other",
            {},
            await raw_get(f"{base.replace(version, theirs['version'])}/3/fields/content", thumbnail="16"),
        )
    )

    for what, params, response in answers:
        assert response.code in (400, 404), (what[:40], params, response.code, response.body[:200])
        assert CANARY not in response.body
        assert not any(thumb in response.body for thumb in other_thumbnails)


async def test_thumbnail_cache_names_are_hashes(api, kpl_home, raw_get):
    code, mine = await api.upload("datasets", imagefolder_zip(), name="pets", format="imagefolder")
    assert code == 201, mine
    response = await raw_get(
        f"datasets/pets/versions/{mine['version']}/records/3/fields/content", thumbnail="16"
    )
    assert response.code == 200
    (cached,) = (kpl_home / "storage" / "cache").rglob("*.png")
    assert cached.parent.name == "thumbnails" and len(cached.stem) == 64
    assert set(cached.stem) <= set("0123456789abcdef")
