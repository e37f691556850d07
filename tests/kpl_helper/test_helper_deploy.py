"""The deploy response helpers give exactly the original's dictionaries."""

from __future__ import annotations

import http.client
import json
import socket
import threading

import numpy as np

from kpl_helper import deploy
from kpl_lab.serving import address


def test_rectangle_box_detection():
    response = deploy.RectangleBoxObjectDetectionResponse(480, 640, 3)
    response.add_object("dog", np.float32(10.7), 20, 110.2, 220, np.float32(0.5))
    assert response.dumps() == {
        "type": "rectangle_box_detection",
        "height": 480,
        "width": 640,
        "depth": 3,
        "objects": [{"name": "dog", "score": 0.5, "xmin": 10, "ymin": 20, "xmax": 110, "ymax": 220}],
        "error": "",
    }
    assert type(response.dumps()["objects"][0]["score"]) is float
    assert response.dumps(error="bad image")["error"] == "bad image"


def test_classification():
    assert deploy.ClassificationResponse.dumps(1, 2, 3, 7) == {
        "type": "classification",
        "height": 1,
        "width": 2,
        "depth": 3,
        "class_id": 7,
        "class_name": None,
        "error": "",
    }
    assert deploy.ClassificationResponse.dumps(1, 2, 3, 7, "cat", "e")["class_name"] == "cat"


def test_segmentation():
    assert deploy.SegmentationResponse.dumps(1, 2, 3, [[0, 1]], error="x") == {
        "type": "segmentation",
        "height": 1,
        "width": 2,
        "depth": 3,
        "mask": [[0, 1]],
        "error": "x",
    }


def test_classification_score_only_when_given():
    assert deploy.ClassificationResponse.dumps(1, 2, 3, 7, "cat", score=np.float32(0.25))["score"] == 0.25


def _call(port, method, path, body=None, content_type="image/png"):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_serve_answers_health_predict_bad_input_and_metrics():
    def predict(data, content_type):
        if data == b"boom":
            raise RuntimeError("the model broke")
        if not data.startswith(b"img"):
            raise deploy.BadInput(f"not an image: {content_type}")
        response = deploy.RectangleBoxObjectDetectionResponse(4, 4, 3)
        response.add_object(data.decode(), 0, 0, 1, 1, 0.9)
        return response

    server = deploy.make_server(predict, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert _call(port, "GET", "/health") == (200, {"status": "ok"})
        status, body = _call(port, "POST", "/predict", b"img-a")
        assert status == 200 and body["objects"][0]["name"] == "img-a"
        assert _call(port, "POST", "/predict", b"text", "text/plain") == (
            400,
            {"error": "not an image: text/plain"},
        )
        assert _call(port, "POST", "/predict", b"boom") == (500, {"error": "RuntimeError: the model broke"})
        status, metrics = _call(port, "GET", "/metrics")
        assert (metrics["requests"], metrics["errors"], len(metrics["latency_ms"])) == (3, 2, 3)
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_leaves_in_one_send(monkeypatch):
    """Head and body together: a caller (the gateway) wakes once per answer, not once for each part."""
    server = deploy.make_server(lambda data, content_type: {"label": "x" * 200}, port=0)
    port = server.server_address[1]
    sends = []
    for method in ("send", "sendall"):
        original = getattr(socket.socket, method)

        def counted(sock, data, *args, _original=original):
            if sock.getsockname()[1] == port:  # the server's end of the connection
                sends.append(bytes(data))
            return _original(sock, data, *args)

        monkeypatch.setattr(socket.socket, method, counted)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert _call(port, "POST", "/predict", b"img") == (200, {"label": "x" * 200})
    finally:
        server.shutdown()
        server.server_close()
    assert len(sends) == 1 and sends[0].startswith(b"HTTP/1.1 200") and sends[0].endswith(b"x" * 200 + b'"}')


def test_serve_listens_on_the_platforms_unix_socket_when_given_one(tmp_path, monkeypatch):
    path = tmp_path / "http.sock"
    path.write_text("left by a server that crashed")
    monkeypatch.setenv(deploy.SOCKET_VARIABLE, str(path))
    monkeypatch.setenv(deploy.PORT_VARIABLE, "1")  # not used: the socket wins
    server = deploy.make_server(lambda data, content_type: {"label": data.decode()})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert deploy.address(server) == f"unix:{path}"
        assert path.is_socket()
        for body in (b"a", b"b"):
            status, answer = address.request(f"unix:{path}", "POST", "/predict", 10, body)
            assert (status, json.loads(answer)) == (200, {"label": body.decode()})
        assert address.request(f"unix:{path}", "GET", "/health", 10)[0] == 200
    finally:
        server.shutdown()
        server.server_close()
