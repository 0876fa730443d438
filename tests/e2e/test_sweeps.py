"""Real sweeps on simulated GPUs: builtin Keras members that really train, `max_parallel`
read from the members' own start and end times, the leaderboard against the members' own
metric histories, a diverging member stopped early, and a sweep that outlives a restart."""

import time
from typing import Any

import pytest

from service.settings import Settings
from tests.conftest import TINY_KERAS, command_spec, ended, job_spec, serving, wait_for

pytestmark = pytest.mark.e2e


def four_gpus(settings: Settings) -> Settings:
    """Four GPUs: the sweep's `max_parallel`, not the box, is what holds members back."""
    return settings.model_copy(update={"gpus": "sim:4x8GiB"})


def submit(client, spec: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/sweeps", json=spec)
    assert response.status_code == 201, response.text
    return response.json()


def wait_sweep(client, sweep_id: int, until, timeout_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    sweep: dict[str, Any] = {}
    while time.monotonic() < deadline:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        if until(sweep):
            return sweep
        time.sleep(0.2)
    raise AssertionError(f"sweep {sweep_id} did not get there; last seen: {sweep}")


def most_at_once(jobs: list[dict[str, Any]]) -> int:
    """The most jobs whose [started_at, finished_at] intervals overlap at one moment."""
    moments = sorted(
        [(j["started_at"], 1) for j in jobs] + [(j["finished_at"], -1) for j in jobs],
        key=lambda m: (m[0], m[1]),  # an end before a start at the same instant
    )
    now = most = 0
    for _, step in moments:
        now += step
        most = max(most, now)
    return most


def test_a_grid_runs_every_member_two_at_a_time_and_ranks_them_by_the_real_metric(settings):
    keras = {**TINY_KERAS, "epochs": 3, "validation_split": 0.25}
    spec = job_spec(
        name="grid",
        keras=keras,
        sweep={
            "parameters": {"keras.learning_rate": [0.05, 0.0005], "keras.batch_size": [32, 64]},
            "max_parallel": 2,
            "metric": "val_loss",
        },
    )
    with serving(four_gpus(settings)) as client:
        sweep = submit(client, spec)
        assert sweep["size"] == 4 and sweep["warnings"] == []
        done = wait_sweep(client, sweep["id"], lambda s: s["status"] == "ended")
        members = done["members"]
        jobs = [client.get(f"/v1/jobs/{m['job_id']}").json() for m in members]
        histories = {
            m["job_id"]: client.get(f"/v1/jobs/{m['job_id']}/metrics").json()["epochs"]
            for m in members
        }
    assert done["counts"] == {"succeeded": 4}
    assert most_at_once(jobs) == 2
    # Every combination once, each put into the member's own spec.
    given = {(j["spec"]["keras"]["learning_rate"], j["spec"]["keras"]["batch_size"]) for j in jobs}
    assert given == {(0.05, 32), (0.05, 64), (0.0005, 32), (0.0005, 64)}
    for job in jobs:
        assert job["params"] == {
            "keras.learning_rate": job["spec"]["keras"]["learning_rate"],
            "keras.batch_size": job["spec"]["keras"]["batch_size"],
        }
    # The leaderboard is the members' own histories, ranked: best (lowest) first.
    for member in members:
        values = [e["val_loss"] for e in histories[member["job_id"]]]
        assert len(values) == 3 and member["epochs"] == 3
        assert member["best"] == pytest.approx(min(values))
        assert member["last"] == pytest.approx(values[-1])
    bests = [m["best"] for m in members]
    assert bests == sorted(bests) and [m["rank"] for m in members] == [1, 2, 3, 4]
    assert done["best"] == {
        "job_id": members[0]["job_id"],
        "params": members[0]["params"],
        "value": members[0]["best"],
    }


def test_a_diverging_member_is_stopped_early_and_its_gpu_goes_to_the_next(settings):
    keras = {
        **TINY_KERAS,
        "epochs": 60,
        "batch_size": 64,
        "validation_split": 0.25,
        "data": {**TINY_KERAS["data"], "samples": 2048},
    }
    rates = [0.001, 10.0, 0.002]  # 10 makes the loss diverge
    spec = job_spec(
        name="stopping",
        keras=keras,
        sweep={
            "search": "list",
            "points": [{"keras.learning_rate": r} for r in rates],
            "max_parallel": 2,
            "metric": "val_loss",
            "early_stopping": {"grace_epochs": 1, "min_members": 1},
        },
    )
    with serving(four_gpus(settings)) as client:
        sweep = submit(client, spec)
        ids = [m["job_id"] for m in sorted(sweep["members"], key=lambda m: m["job_id"])]
        steady, diverging, third = ids
        stopped = wait_for(client, diverging, ended, timeout_s=120)
        started = wait_for(client, third, lambda j: j["started_at"] is not None, timeout_s=60)
        first = client.get(f"/v1/jobs/{steady}").json()
        client.post(f"/v1/sweeps/{sweep['id']}/cancel")  # the rest need not train 60 epochs
        board = wait_sweep(client, sweep["id"], lambda s: s["status"] == "cancelled")
        history = client.get(f"/v1/jobs/{diverging}/metrics").json()["epochs"]
    assert stopped["status"] == "cancelled" and stopped["reason"] == "early_stopped"
    assert stopped["message"].startswith("stopped early at epoch ")
    assert "trailed the median" in stopped["message"] or "never a number" in stopped["message"]
    assert 1 <= len(history) < 60  # it kept the epochs it ran
    # Its GPU went to the third member while the first still trained.
    assert started["started_at"] >= stopped["finished_at"]
    assert first["status"] == "running"
    member = next(m for m in board["members"] if m["job_id"] == diverging)
    assert member["reason"] == "early_stopped"


def test_cancel_hold_and_release_act_on_the_members_still_queued_or_running(settings):
    member = command_spec("import time; time.sleep(60)", gpus=1)
    spec = {**member, "name": "held", "sweep": {"parameters": {"n": [1, 2, 3]}, "max_parallel": 1}}
    with serving(settings) as client:
        sweep = submit(client, spec)
        ids = sorted(m["job_id"] for m in sweep["members"])
        wait_for(client, ids[0], lambda j: j["status"] == "running")
        held = client.post(f"/v1/sweeps/{sweep['id']}/hold").json()
        assert held["held"] is True
        assert [client.get(f"/v1/jobs/{i}").json()["held"] for i in ids] == [False, True, True]
        released = client.post(f"/v1/sweeps/{sweep['id']}/release").json()
        assert released["held"] is False
        assert not any(client.get(f"/v1/jobs/{i}").json()["held"] for i in ids)
        response = client.post(f"/v1/sweeps/{sweep['id']}/cancel")
        assert response.status_code == 202
        done = wait_sweep(client, sweep["id"], lambda s: s["status"] == "cancelled", 60)
        again = client.post(f"/v1/sweeps/{sweep['id']}/cancel")
        hold_ended = client.post(f"/v1/sweeps/{sweep['id']}/hold")
    assert done["counts"] == {"cancelled": 3}
    assert {m["reason"] for m in done["members"]} == {"cancelled_by_user"}
    assert done["cancelled_by"] == "anonymous"
    assert again.status_code == 409 and "already ended" in again.json()["detail"]
    assert hold_ended.status_code == 409


def test_a_restart_in_the_middle_loses_no_member_and_the_sweep_goes_on(settings):
    code = "import os, time; time.sleep(1.5); print('n is', os.environ['GPUQ_PARAM_N'])"
    spec = {
        **command_spec(code, gpus=1),
        "name": "restart",
        "sweep": {"parameters": {"n": [1, 2, 3, 4]}, "max_parallel": 1, "metric": "loss"},
    }
    with serving(settings) as client:
        sweep = submit(client, spec)
        ids = sorted(m["job_id"] for m in sweep["members"])
        wait_for(client, ids[1], lambda j: j["status"] == "running")
    # gpuq is down while the second member runs; a new gpuq takes the sweep over.
    with serving(settings) as client:
        done = wait_sweep(client, sweep["id"], lambda s: s["status"] == "ended", 120)
        logs = [client.get(f"/v1/jobs/{i}/logs").text for i in ids]
        jobs = [client.get(f"/v1/jobs/{i}").json() for i in ids]
    assert done["counts"] == {"succeeded": 4}
    assert [f"n is {n}" in log for n, log in zip([1, 2, 3, 4], logs, strict=True)] == [True] * 4
    assert most_at_once(jobs) == 1
    # The program reports no metric: the sweep says so once a member has ended.
    assert done["warnings"] == [
        "no member has reported the metric 'loss' yet (they report no epoch metrics): the "
        "leaderboard ranks nothing and early stopping never acts"
    ]
