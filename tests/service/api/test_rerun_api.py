"""`POST /v1/jobs/{id}/rerun`: the same spec again, with changes merged in; its owner's or an
admin's; a change that makes the spec invalid is a 422 naming the field."""

from service.jobs.rerun import merged
from service.team import users
from tests.conftest import command_spec


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_job_runs_again_with_its_spec_and_the_changes_merged_in(api):
    db = api.app.state.service.db
    ana, bo = (users.add_user(db, name) for name in ("ana", "bo"))
    spec = {**command_spec("print(1)", gpus=1, memory_mb=4096), "priority": -5, "depends_on": []}
    spec["command"]["env"] = {"SEED": "7"}
    first = api.post("/v1/jobs", json=spec, headers=auth(ana)).json()
    assert "id" in first, first

    again = api.post(
        f"/v1/jobs/{first['id']}/rerun", json={"resources": {"gpus": 2}}, headers=auth(ana)
    )
    assert again.status_code == 201, again.text
    job = again.json()
    assert job["id"] != first["id"] and job["owner"] == "ana"
    assert job["spec"]["resources"]["gpus"] == 2
    assert job["spec"]["resources"]["memory_mb"] == 4096, "the rest of resources is kept"
    assert job["spec"]["command"] == first["spec"]["command"]
    assert job["spec"]["priority"] == -5

    unchanged = api.post(f"/v1/jobs/{first['id']}/rerun", headers=auth(ana)).json()
    assert unchanged["spec"] == first["spec"]

    refused = api.post(f"/v1/jobs/{first['id']}/rerun", headers=auth(bo))
    assert refused.status_code == 403
    assert "belongs to ana" in refused.json()["detail"]

    bad = api.post(
        f"/v1/jobs/{first['id']}/rerun", json={"resources": {"gpus": -1}}, headers=auth(ana)
    )
    assert bad.status_code == 422, bad.text
    (error,) = bad.json()["detail"]
    assert error["loc"] == ["body", "resources", "gpus"]

    missing = api.post("/v1/jobs/999999/rerun", headers=auth(ana))
    assert missing.status_code == 404


def test_a_rerun_waits_for_nothing_the_first_one_waited_for(api):
    first = api.post("/v1/jobs", json=command_spec("print(1)", gpus=1)).json()
    later = {**command_spec("print(2)", gpus=1), "depends_on": [first["id"]]}
    second = api.post("/v1/jobs", json=later).json()
    again = api.post(f"/v1/jobs/{second['id']}/rerun").json()
    assert again["spec"]["depends_on"] == []


def test_a_sweep_members_rerun_keeps_its_parameters_outside_the_sweep(api):
    sweep = {**command_spec("print(1)", gpus=1), "sweep": {"parameters": {"lr": [0.1, 0.2]}}}
    made = api.post("/v1/sweeps", json=sweep).json()
    member = api.get(f"/v1/sweeps/{made['id']}").json()["members"][0]
    again = api.post(f"/v1/jobs/{member['job_id']}/rerun").json()
    assert again["params"] == member["params"]  # GPUQ_PARAM_LR comes with it
    assert again["sweep_id"] is None and again["id"] != member["job_id"]


def test_changes_merge_objects_and_replace_the_rest():
    spec = {"resources": {"gpus": 1, "memory_mb": 10}, "name": "a", "tags": [1]}
    assert merged(spec, {"resources": {"gpus": 2}, "name": "b", "tags": [2]}) == {
        "resources": {"gpus": 2, "memory_mb": 10},
        "name": "b",
        "tags": [2],
    }
    assert merged(spec, {"resources": {"memory_mb": None}}) == {**spec, "resources": {"gpus": 1}}
