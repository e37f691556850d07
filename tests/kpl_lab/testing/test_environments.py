"""The test environments' builder that `.ci/run` starts beside its lint steps."""

from __future__ import annotations

import subprocess

import kpl_lab
from kpl_lab.testing import environments


def test_main_reports_each_environment_and_fails_only_on_an_unexpected_error(monkeypatch, capsys, tmp_path):
    def user_python():
        raise environments.Unavailable("needs root")

    def original_python():
        return tmp_path / "bin" / "python"

    monkeypatch.setattr(environments, "user_python", user_python)
    monkeypatch.setattr(environments, "original_python", original_python)
    assert environments.main() == 0
    printed = capsys.readouterr().out
    assert "user_python: not built: needs root" in printed
    assert f"original_python: {tmp_path / 'bin' / 'python'} (" in printed

    def original_python():  # noqa: F811 - the same name, as main prints it
        raise OSError("disk full")

    monkeypatch.setattr(environments, "original_python", original_python)
    assert environments.main() == 1
    assert "original_python: failed: OSError('disk full')" in capsys.readouterr().out


def test_the_users_python_is_the_one_the_fixture_uses(user_python):
    # built once under its lock by whoever came first: this call finds it and builds nothing
    assert str(environments.user_python()) == user_python
    found = subprocess.run(
        [user_python, "-c", "import kpl_lab; print(kpl_lab.__version__)"], capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == kpl_lab.__version__
