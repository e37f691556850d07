"""The spawn form: only usable profiles, inputs capped by profile and quota, form data as user_options."""

from __future__ import annotations

from kpl_lab.spawner.form import options_from_form, render_form
from kpl_lab.spawner.profiles import parse_profiles

from .conftest import PROFILES


def room(quota=None, project=None, cpu=16.0, memory=65536, gpus=3, used=None, notebooks=0) -> dict:
    """Return a project's room (`Ledger.room`): a machine of these, what the project and all projects hold."""
    project = {"cpu": 0.0, "memory": 0, "devices": {}} | (project or {})
    return {
        "capacity": {"cpu": cpu, "memory": memory, "devices": {"gpu": list(range(gpus))}},
        "used": used or project,
        "project_used": project,
        "quota": quota,
        "notebooks": notebooks,
    }


def test_only_profiles_the_projects_may_use():
    html = render_form(parse_profiles(PROFILES), ["nlp"], {"nlp": room()})
    assert 'data-profile="cpu"' in html and 'data-profile="shared"' in html
    assert 'data-profile="gpu"' not in html
    assert '<option value="nlp" selected>nlp</option>' in html


def test_inputs_capped_by_profile_and_quota():
    rooms = {"vision": room({"gpu": 1, "memory": 6000}, {"memory": 1024, "devices": {"gpu": [0]}})}
    html = render_form(parse_profiles(PROFILES), ["vision"], rooms)
    assert 'name="gpu-accelerators" value="1" min="0" max="1"' in html  # quota 1 under the profile's 2
    assert 'name="gpu-memory" value="1024" min="1" max="6000"' in html  # quota under the profile's 8192
    assert 'name="cpu-memory" value="512" min="1" max="4096"' in html  # the profile's own maximum
    assert "<b>vision</b>: gpu 1 of 1 in use, memory 1024 of 6000 in use" in html


def test_a_project_without_quota_keeps_the_profile_maximum():
    rooms = {"vision": room({"gpu": 1}), "nlp": room()}
    html = render_form(parse_profiles(PROFILES), ["nlp", "vision"], rooms)
    assert 'name="shared-accelerators" value="1" min="0" max="1"' in html
    assert "<b>nlp</b>: no quota" in html


def test_previous_choice_is_selected_and_text_is_escaped():
    profiles = parse_profiles(
        [{"slug": "a", "display_name": "<script>x</script>"}, {"slug": "b", "cpu_max": 4}]
    )
    html = render_form(profiles, ["p"], {"p": room()}, previous={"profile": "b", "cpu": 3})
    assert '<input type="radio" name="profile" value="b" checked>' in html
    assert 'name="b-cpu" value="3"' in html
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_no_profile_available():
    profiles = parse_profiles([{"slug": "a", "projects": ["x"]}])
    assert "No notebook profile is available" in render_form(profiles, ["p"], {"p": room()})


def test_form_data_becomes_user_options():
    form = {
        "profile": ["gpu"],
        "project": ["vision"],
        "gpu-cpu": ["2"],
        "gpu-memory": ["4096"],
        "gpu-accelerators": ["1"],
        "gpu-shm": [""],
        "cpu-memory": ["99999"],  # another profile's field: ignored
    }
    assert options_from_form(form) == {
        "profile": "gpu",
        "project": "vision",
        "cpu": 2.0,
        "memory": 4096,
        "accelerators": 1,
    }
    assert options_from_form({"profile": ["cpu"], "cpu-memory": ["lots"]}) == {
        "profile": "cpu",
        "memory": "lots",
    }


def test_fields_start_within_the_members_quota():
    profiles = parse_profiles([{"slug": "std", "cpu": 1, "cpu_max": 2, "memory": 2048, "memory_max": 4096}])
    html = render_form(profiles, ["vision"], {"vision": room({"cpu": 0.5, "memory": 1024})})
    assert 'name="std-cpu" value="0.5" min="0.1" max="0.5"' in html
    assert 'name="std-memory" value="1024" min="1" max="1024"' in html


def test_fields_start_within_what_the_project_has_free():
    profiles = parse_profiles([{"slug": "std", "cpu": 2, "cpu_max": 4, "memory": 2048, "memory_max": 4096}])
    rooms = {"vision": room({"cpu": 4, "memory": 4096}, {"cpu": 3, "memory": 3072})}
    html = render_form(profiles, ["vision"], rooms)
    assert 'name="std-cpu" value="1.0" min="0.1" max="4"' in html
    assert 'name="std-memory" value="1024" min="1" max="4096"' in html


def test_unknown_form_fields_pass_through_for_the_start_to_refuse():
    form = {"profile": ["cpu"], "cpu-cpu": ["2"], "colour": ["blue", "red"]}
    assert options_from_form(form) == {"profile": "cpu", "cpu": 2.0, "colour": ["blue", "red"]}


def test_on_a_two_core_machine_the_maximum_is_the_machines_and_defaults_fit_what_is_free():
    profiles = parse_profiles([{"slug": "cpu", "cpu": 1, "cpu_max": 4, "memory": 2048, "memory_max": 8192}])
    # the first member's notebook and the gateway hold 1.5 of the 2 cores; the project allows 4
    rooms = {"demo": room({"cpu": 4, "memory": 8192}, {"cpu": 1, "memory": 2048}, cpu=2, memory=7800,
                          gpus=0, used={"cpu": 1.5, "memory": 2560, "devices": {}}, notebooks=1)}  # fmt: skip
    html = render_form(profiles, ["demo"], rooms)
    assert 'name="cpu-cpu" value="0.5" min="0.1" max="2" step="0.1"> (max 2)' in html
    assert 'name="cpu-memory" value="2048" min="1" max="7800"' in html  # the machine's, under the quota
    assert "cpu capped at 0.5: profile cpu asks 1 CPU, 0.5 free now" in html
    assert "<b>demo</b>: cpu 1 of 4 in use, memory 2048 of 8192 in use" in html
    assert "this machine: 1.5 of 2 CPUs, 2560 of 7800 MB of memory in use" in html


def test_a_project_without_quota_shows_what_the_machine_has_free():
    profiles = parse_profiles([{"slug": "cpu", "cpu": 1, "cpu_max": 4}])
    html = render_form(profiles, ["demo"], {"demo": room(cpu=2, gpus=0, used={"cpu": 2, "memory": 0})})
    assert "<b>demo</b>: no quota" in html and "this machine: 2 of 2 CPUs" in html
    assert (
        'name="cpu-cpu" value="1.0" min="0.1" max="2"' in html
    )  # nothing free: it stays, the start says why
