"""Reserved-but-idle GPU-hours in `/v1/usage`: a reservation's window on each of its GPUs,
less the time anyone ran there, against whoever booked it; up to its release, and up to
now for one still open."""

from datetime import UTC, datetime, timedelta

import pytest

from service.store.reservation_tables import Reservation
from service.team import users
from service.usage import ledger
from tests.conftest import command_spec, ended, wait_for

HOUR = timedelta(hours=1)
#: a whole past window, well inside the default week
START = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - 30 * HOUR


def reserve(db, owner: str, gpus: list[int], starts: datetime, hours: float, **fields) -> None:
    with db.write() as session:  # as the reservations API stores one
        session.add(
            Reservation(
                name=fields.pop("name", "paper"),
                owner=owner,
                users=[owner],
                gpu_indices=gpus,
                starts_at=starts,
                ends_at=starts + hours * HOUR,
                **fields,
            )
        )


def attempt(db, owner: str, gpus: list[int], starts: datetime, hours: float) -> None:
    row = {
        "job_id": 1,
        "attempt": 1,
        "owner": owner,
        "gpus": len(gpus),
        "gpu_indices": gpus,
        "queued_at": starts,
        "started_at": starts,
        "ended_at": starts + hours * HOUR,
        "outcome": "succeeded",
        "reason": None,
        "final": True,
        "gpu_seconds": 3600 * hours * len(gpus),
        "lost_gpu_seconds": 0.0,
        "preempted_by": None,
    }
    with db.write() as session:
        ledger.write(session, row)


@pytest.fixture
def team(api):
    db = api.app.state.service.db
    tokens = {n: users.add_user(db, n, admin=n == "root") for n in ("root", "ana", "bo")}
    return api, db, {n: {"Authorization": f"Bearer {t}"} for n, t in tokens.items()}


def idle(report, key: str, value) -> float:
    return next(r["reserved_idle_gpu_hours"] for r in report["rows"] if r[key] == value)


def test_a_reservations_idle_hours_count_against_its_owner(team):
    api, db, who = team
    reserve(db, "ana", [0, 1], START, 4)  # 8 GPU-hours booked
    attempt(db, "bo", [0], START + HOUR, 1)  # one of them used
    report = api.get("/v1/usage", headers=who["root"]).json()
    assert report["total"]["reserved_idle_gpu_hours"] == pytest.approx(7)
    assert idle(report, "owner", "ana") == pytest.approx(7)
    assert idle(report, "owner", "bo") == 0
    attempt(db, "ana", [0], START + 1.5 * HOUR, 1)  # overlapping it: not counted twice
    report = api.get("/v1/usage", headers=who["root"]).json()
    assert report["total"]["reserved_idle_gpu_hours"] == pytest.approx(8 - 1.5)
    assert idle(report, "owner", "ana") == pytest.approx(6.5)
    by_gpu = api.get("/v1/usage", params={"by": "gpu"}, headers=who["root"]).json()
    assert (idle(by_gpu, "gpu", 0), idle(by_gpu, "gpu", 1)) == pytest.approx((2.5, 4))
    # A member sees their own rows, and the team's total.
    mine = api.get("/v1/usage", headers=who["bo"]).json()
    assert [r["owner"] for r in mine["rows"]] == ["bo"] and idle(mine, "owner", "bo") == 0
    assert mine["total"]["reserved_idle_gpu_hours"] == pytest.approx(6.5)
    theirs = api.get("/v1/usage", params={"by": "gpu"}, headers=who["bo"]).json()
    assert [r["reserved_idle_gpu_hours"] for r in theirs["rows"]] == [0, 0]
    hers = api.get("/v1/usage", params={"by": "gpu"}, headers=who["ana"]).json()
    assert [r["reserved_idle_gpu_hours"] for r in hers["rows"]] == pytest.approx([2.5, 4])


def test_only_the_part_inside_the_period_counts(team):
    api, db, who = team
    reserve(db, "ana", [0, 1], START, 4)
    attempt(db, "bo", [0], START, 3.5)  # before the period but for its first half hour
    since = (START + 3 * HOUR).isoformat()
    report = api.get("/v1/usage", params={"since": since}, headers=who["root"]).json()
    assert idle(report, "owner", "ana") == pytest.approx(0.5 + 1)


def test_released_early_counts_to_its_release_and_open_ones_to_now(team):
    api, db, who = team
    reserve(db, "ana", [0], START, 10, released_at=START + 2 * HOUR, released_why="deleted")
    now = datetime.now(UTC)
    reserve(db, "bo", [1], now - 0.5 * HOUR, 3, name="demo")
    # Deleted before it began: nothing was booked.
    reserve(db, "ana", [1], START, 2, name="gone", released_at=START - HOUR)
    report = api.get("/v1/usage", headers=who["root"]).json()
    assert idle(report, "owner", "ana") == pytest.approx(2)
    assert idle(report, "owner", "bo") == pytest.approx(0.5, abs=0.01)


def test_by_day_across_midnight(team):
    api, db, who = team
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - 24 * HOUR
    reserve(db, "ana", [0], midnight - 3 * HOUR, 5)  # 3 h one day, 2 h the next
    report = api.get("/v1/usage", params={"by": "day"}, headers=who["root"]).json()
    days = {r["day"]: r["reserved_idle_gpu_hours"] for r in report["rows"]}
    assert days[(midnight - HOUR).date().isoformat()] == pytest.approx(3)
    assert days[midnight.date().isoformat()] == pytest.approx(2)
    attempt(db, "bo", [0], midnight - HOUR, 2)  # an attempt of both days: used once
    report = api.get("/v1/usage", params={"by": "day"}, headers=who["root"]).json()
    days = {r["day"]: r["reserved_idle_gpu_hours"] for r in report["rows"]}
    assert days[(midnight - HOUR).date().isoformat()] == pytest.approx(2)
    assert days[midnight.date().isoformat()] == pytest.approx(1)
    assert report["total"]["reserved_idle_gpu_hours"] == pytest.approx(3)


def test_a_job_running_on_it_now_is_not_idle(client):
    db = client.app.state.service.db
    who = {"Authorization": f"Bearer {users.add_user(db, 'ana')}"}
    client.headers.update(who)
    reserve(db, "ana", [0], datetime.now(UTC) - HOUR, 3)
    job = client.post("/v1/jobs", json=command_spec("import time; time.sleep(60)", gpu_ids=[0]))
    running = wait_for(client, job.json()["id"], lambda j: j["status"] == "running")
    report = client.get("/v1/usage").json()
    started = datetime.fromisoformat(running["started_at"])
    expected = (started - (datetime.now(UTC) - HOUR)).total_seconds() / 3600
    assert idle(report, "owner", "ana") == pytest.approx(expected, abs=0.01)
    client.post(f"/v1/jobs/{running['id']}/cancel")
    wait_for(client, running["id"], ended)
