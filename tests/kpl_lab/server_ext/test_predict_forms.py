"""The REST predict route's multipart forms: one that cannot be read, or holds no file, is refused (400)."""

from __future__ import annotations

import json

import pytest

FILE = (
    b'Content-Disposition: form-data; name="file"; filename="a.png"\r\nContent-Type: image/png\r\n\r\nimg\r\n'
)


@pytest.mark.parametrize(
    ("content_type", "body", "problem"),
    [
        ("multipart/form-data", b"--xyz\r\n" + FILE + b"--xyz--\r\n", "multipart boundary not found"),
        ("multipart/form-data; boundary=xyz", b"--xyz\r\n" + FILE, "no final boundary found"),
        ("multipart/form-data; boundary=xyz", b"--xyz\r\nimg\r\n--xyz--\r\n", "missing headers"),
        (
            "multipart/form-data; boundary=xyz",
            b'--xyz\r\nContent-Disposition: form-data; name="text"\r\n\r\nhello\r\n--xyz--\r\n',
            "the multipart body holds no file",
        ),
    ],
    ids=["no boundary", "a boundary never closed", "a part without headers", "no file"],
)
async def test_a_broken_form_is_refused_naming_the_problem(api, content_type, body, problem):
    response = await api.raw("POST", "deployments/any/predict", body, {"Content-Type": content_type})
    error = json.loads(response.body)
    assert response.code == 400 and problem in error["message"], error
