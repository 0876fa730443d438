"""`/v1/sweeps` with the API alone: members stored with their parameters, bad sweeps as
422s naming the field, a sweep stored whole or not at all."""

import pytest

from service.team import users
from tests.conftest import command_spec, ended, job_spec, serving, wait_for

GRID = {"parameters": {"keras.learning_rate": [0.01, 0.001], "keras.batch_size": [32, 64]}}


def test_a_sweep_stores_ordinary_member_jobs_with_its_owner_and_priority(api):
    response = api.post("/v1/sweeps", json=job_spec(priority=-3, sweep={**GRID, "max_parallel": 2}))
    assert response.status_code == 201, response.text
    sweep = response.json()
    assert (sweep["status"], sweep["size"], sweep["counts"]) == ("queued", 4, {"queued": 4})
    for member in sweep["members"]:
        job = api.get(f"/v1/jobs/{member['job_id']}").json()
        assert job["sweep_id"] == sweep["id"] and job["priority"] == -3
        assert job["params"] == member["params"]
        assert job["spec"]["keras"]["learning_rate"] == member["params"]["keras.learning_rate"]
    listed = api.get("/v1/sweeps").json()["sweeps"]
    assert [(s["id"], s["counts"]) for s in listed] == [(sweep["id"], {"queued": 4})]
    assert "members" not in listed[0]
    assert api.get("/v1/sweeps/99").status_code == 404


@pytest.mark.parametrize(
    ("section", "loc", "words"),
    [
        ({"parameters": {"keras.lr": [1]}}, ["parameters", "keras.lr"], "not a field of keras"),
        ({"parameters": {"keras.seed": []}}, ["parameters", "keras.seed", "list"], "at least 1"),
        (
            {
                "search": "random",
                "samples": 3,
                "parameters": {"keras.learning_rate": {"low": 1, "high": 0.1}},
            },
            ["parameters", "keras.learning_rate", "range"],
            "above high",
        ),
        ({"parameters": {"keras.seed": list(range(501))}}, [], "would make 501 jobs"),
        (
            {"search": "list", "points": [{"keras.epochs": 0}]},
            ["points", "keras.epochs"],
            "member 1",
        ),
    ],
)
def test_a_bad_sweep_is_a_422_naming_the_field(api, section, loc, words):
    response = api.post("/v1/sweeps", json=job_spec(sweep=section))
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "sweep", *loc]
    assert words in error["msg"]
    assert api.get("/v1/sweeps").json()["sweeps"] == []
    assert api.get("/v1/jobs").json()["jobs"] == []


def test_a_metric_no_member_reports_is_a_warning_on_the_sweep(api):
    response = api.post("/v1/sweeps", json=job_spec(sweep={**GRID, "metric": "accuracy"}))
    assert response.status_code == 201
    assert "no member reports the metric 'accuracy'" in response.json()["warnings"][0]


def test_a_sweep_over_the_owners_queue_quota_stores_nothing(settings):
    with serving(settings.model_copy(update={"max_jobs_queued": 3}), schedule=False) as api:
        response = api.post("/v1/sweeps", json=job_spec(sweep=GRID))
        assert response.status_code == 429
        assert response.json()["detail"].startswith("member 4 of 4: ")
        assert api.get("/v1/jobs").json()["jobs"] == []
        assert api.get("/v1/sweeps").json()["sweeps"] == []


def test_an_idempotency_key_replays_the_sweep_a_random_search_included(api):
    section = {
        "search": "random",
        "samples": 3,
        "parameters": {"keras.learning_rate": {"low": 1e-4, "high": 1e-2, "scale": "log"}},
    }
    headers = {"Idempotency-Key": "sweep-1"}
    first = api.post("/v1/sweeps", json=job_spec(sweep=section), headers=headers)
    again = api.post("/v1/sweeps", json=job_spec(sweep=section), headers=headers)
    other = api.post("/v1/sweeps", json=job_spec(sweep=GRID), headers=headers)
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert again.json()["id"] == first.json()["id"]
    assert first.json()["spec"]["sweep"]["seed"] is not None  # drawn, and recorded
    assert len(api.get("/v1/jobs").json()["jobs"]) == 3


def test_cancel_and_hold_act_on_queued_members_only(api):
    sweep = api.post("/v1/sweeps", json=job_spec(sweep=GRID)).json()
    held = api.post(f"/v1/sweeps/{sweep['id']}/hold").json()
    assert held["held"] and all(m["held"] for m in held["members"])
    cancelled = api.post(f"/v1/sweeps/{sweep['id']}/cancel").json()
    assert (cancelled["status"], cancelled["counts"]) == ("cancelled", {"cancelled": 4})
    job = api.get(f"/v1/jobs/{sweep['members'][0]['job_id']}").json()
    assert job["reason"] == "cancelled_by_user"
    assert job["message"] == f"its sweep {sweep['id']} was cancelled by anonymous"
    assert api.post(f"/v1/sweeps/{sweep['id']}/release").status_code == 409


def test_a_command_sweep_may_not_set_its_own_parameter_variables(api):
    spec = command_spec("pass")
    spec["command"]["env"] = {"GPUQ_PARAM_LR": "1"}
    response = api.post("/v1/sweeps", json={**spec, "sweep": {"parameters": {"lr": [1, 2]}}})
    assert response.status_code == 422
    assert "GPUQ_PARAM_LR" in response.json()["detail"][0]["msg"]


def test_each_member_gets_the_sites_default_cores_and_host_memory(settings):
    defaults = {"host_cpus": 16, "default_cpus_per_gpu": 2, "default_host_memory_per_gpu_mb": 4096}
    with serving(settings.model_copy(update=defaults), schedule=False) as api:
        sweep = {"parameters": {"resources.memory_mb": [2048, 4096], "resources.gpus": [1, 2]}}
        response = api.post("/v1/sweeps", json=job_spec(sweep=sweep))
        assert response.status_code == 201, response.text
        got = set()
        for member in response.json()["members"]:
            job = api.get(f"/v1/jobs/{member['job_id']}").json()
            got.add(
                (
                    job["spec"]["resources"]["gpus"],
                    job["memory_mb"],
                    job["cpus"],
                    job["host_memory_mb"],
                )
            )
        # GPUs of 8 GiB: a 2 GiB cap is a quarter of one, a 4 GiB cap half
        assert got == {
            (1, 2048, 0.5, 1024),
            (1, 4096, 1, 2048),
            (2, 2048, 1, 2048),
            (2, 4096, 2, 4096),
        }


def test_an_admins_rerun_of_a_sweep_is_the_owners_held_as_the_sweep_is(client):
    db = client.app.state.service.db
    ana, root = users.add_user(db, "ana"), users.add_user(db, "root", admin=True)
    as_ana, as_root = ({"Authorization": f"Bearer {t}"} for t in (ana, root))
    # x=1 fails; x=2 runs on; x=3 waits behind it (one at a time), so the sweep can be held.
    code = "import os, time; x = os.environ['GPUQ_PARAM_X']; time.sleep(0 if x == '1' else 30)"
    code += "; raise SystemExit(x == '1')"
    sweep = {"parameters": {"x": [1, 2, 3]}, "max_parallel": 1}
    made = client.post(
        "/v1/sweeps", json={**command_spec(code, gpus=0), "sweep": sweep}, headers=as_ana
    ).json()
    members = client.get(f"/v1/sweeps/{made['id']}", headers=as_ana).json()["members"]
    (member,) = (m for m in members if m["params"] == {"x": 1})
    client.headers.update(as_ana)  # for wait_for's reads
    wait_for(client, member["job_id"], ended)
    assert client.post(f"/v1/sweeps/{made['id']}/hold", headers=as_ana).status_code == 200

    again = client.post(f"/v1/sweeps/{made['id']}/rerun", headers=as_root)
    assert again.status_code == 201, again.text
    (new,) = (
        m
        for m in again.json()["members"]
        if m["params"] == {"x": 1} and m["job_id"] != member["job_id"]
    )
    job = client.get(f"/v1/jobs/{new['job_id']}", headers=as_ana).json()
    assert (job["owner"], job["held"], job["params"]) == ("ana", True, {"x": 1})

    assert client.post(f"/v1/sweeps/{made['id']}/cancel", headers=as_ana).status_code == 202
    cancelled = client.post(f"/v1/sweeps/{made['id']}/rerun", headers=as_root)
    assert cancelled.status_code == 409
    assert "was cancelled by ana" in cancelled.json()["detail"]
