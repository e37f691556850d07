"""`kpl-lab deployment ...` in process: create, canary, promote, predict, show, errors as one line."""

from __future__ import annotations

import json

from kpl_lab.cli import main


def test_canary_and_promote_from_the_command_line(serving_platform, toy, tmp_path, capsys):
    home = ["--home", serving_platform.home]
    production, canary = toy("cat"), toy("dog")

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*home, "deployment", *args])
        out, err = capsys.readouterr()
        return code, out, err

    try:
        code, out, _ = run("create", "pets", "--model", production, "--algorithm", "toy-serve", "--wait")
        assert code == 0 and "1 replica(s), ready" in out
        code, _, err = run("promote", "pets")
        assert code == 2 and "has no canary to promote" in err
        code, out, _ = run(
            "canary", "pets", "--model", canary, "--weight", "20", "--algorithm", "toy-serve", "--wait"
        )
        assert code == 0 and f"canary {canary} gets 20 % of requests" in out
        shown = json.loads(run("show", "pets", "--json")[1])
        assert (shown["model_version"], shown["canary_model_version"], shown["canary_weight"]) == (
            production,
            canary,
            20,
        )
        assert sorted(r["role"] for r in shown["replica_states"]) == ["canary", "production"]
        code, out, _ = run("promote", "pets")
        assert code == 0 and f"{canary} is production" in out
        image = tmp_path / "img.png"
        image.write_bytes(b"img-0")
        answer = json.loads(run("predict", "pets", str(image))[1])
        assert (answer["class_name"], answer["model_version"]) == ("dog", canary)
        shown = json.loads(run("show", "pets", "--json")[1])
        assert shown["canary_model_version"] is None and shown["metrics"][canary]["requests"] == 1
        assert shown["totals"][canary]["requests"] == 1  # the CLI's gateway wrote its count
        assert shown["totals"][canary]["p50_ms"] > 0
        code, out, _ = run("show", "pets")
        assert code == 0 and "REPLICA" in out and "REQUESTS" in out
        assert "ADDRESS" in out and "unix:/" in out  # where the platform reaches each replica
    finally:
        assert run("delete", "pets")[0] == 0
