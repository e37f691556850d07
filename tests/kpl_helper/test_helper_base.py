"""The configuration read from the environment, ready() and done()."""

from __future__ import annotations

from kpl_helper import done, ready
from kpl_helper.base import Config, get_config


def test_outside_the_platform():
    config = get_config()
    assert not config.inner
    assert config.uses_defaults
    assert config.get_parameter() == "{}"  # as the original
    assert config.get_input_root() == ""


def test_inside_a_job(job):
    config = get_config()
    assert config.inner
    assert not config.uses_defaults
    assert config.task_id == "42"
    assert config.function == "train"
    assert config.get_input_root() == str(job.inputs)
    assert config.events_file == str(job.events_file)


def test_original_accessors_outside_the_platform():
    config = Config.from_env({})
    assert config.get_task_id() is None and config.get_env_type() is None and config.get_cluster() is None
    assert [
        config.get_api_url(),
        config.get_jwt_token(),
        config.get_metric_api(),
        config.get_metric_token(),
    ] == [
        "",
        "",
        "",
        "",
    ]


def test_task_id_is_an_int_as_in_the_original():
    inside = {"KPL_INNER": "1"}
    assert Config.from_env({**inside, "KPL_ENV_TASK_ID": "42"}).get_task_id() == 42
    # Platform job ids are hexadecimal: the int reads back with format(n, "010x").
    task_id = Config.from_env({**inside, "KPL_ENV_TASK_ID": "0a3f9c21be"}).get_task_id()
    assert isinstance(task_id, int) and format(task_id, "010x") == "0a3f9c21be"
    assert Config.from_env(inside).get_task_id() == 0  # unset: 0, as the original


def test_original_accessors_map_to_the_job_contract():
    env = {
        "KPL_INNER": "1",
        "KPL_API_URL": "http://127.0.0.1:8888/kpl/api/",
        "KPL_API_TOKEN": "api-token",
        "KPL_EVENTS_URL": "http://platform/kpl/api/jobs/ab/events",
        "KPL_EVENTS_FILE": "/run/events.jsonl",
        "KPL_JOB_TOKEN": "job-token",
    }
    config = Config.from_env(env)
    assert config.get_api_url() == "http://127.0.0.1:8888/kpl/api"
    assert config.get_jwt_token() == "api-token"
    assert config.get_metric_api() == "http://platform/kpl/api/jobs/ab/events"
    assert config.get_metric_token() == "job-token"
    assert config.get_cluster() == "local"
    local = Config.from_env({"KPL_INNER": "1", "KPL_EVENTS_FILE": "/run/events.jsonl"})
    assert local.get_metric_api() == "/run/events.jsonl" and local.get_metric_token() == ""
    pod = Config.from_env({"KPL_INNER": "1", "KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    assert pod.get_cluster() == "kubernetes"


def test_original_module_names():
    from kpl_helper.cli.main import main
    from kpl_helper.progress import Metric
    from kpl_helper.stop import StopTask

    assert callable(main) and callable(Metric().send_progress) and callable(StopTask().stop)


def test_any_kpl_inner_value_means_inside():
    assert Config.from_env({"KPL_INNER": ""}).inner
    assert not Config.from_env({}).inner


def test_notebook_uses_defaults():
    assert Config.from_env({"KPL_INNER": "1", "KPL_ENV": "notebook"}).uses_defaults


def test_ready_and_done_outside_print_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ready()
    done()
    out = capsys.readouterr().out
    assert "[kpl-helper]: ready for using." in out
    assert "[kpl-helper]: execute kpl done()" in out
    assert list(tmp_path.iterdir()) == []


def test_ready_and_done_inside_write_events(job):
    ready()
    done()
    found = job.events()
    assert [e["type"] for e in found] == ["ready", "done"]
    assert all(isinstance(e["time"], float) for e in found)
