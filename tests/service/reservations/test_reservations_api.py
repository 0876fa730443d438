"""`/v1/reservations` on a box with two simulated GPUs (`sim:2x8GiB`): booking by count
and by GPU, what clashes, the per-user limit, bad input, and who may change or delete."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from service.team import users

HOUR = 3600


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"max_reserved_gpu_hours": 10.0})


@pytest.fixture
def team(api):
    db = api.app.state.service.db
    tokens = {
        name: users.add_user(db, name, admin=name == "root") for name in ("root", "ana", "bo")
    }
    return api, {name: {"Authorization": f"Bearer {t}"} for name, t in tokens.items()}


def at(hours: float) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()


def book(api, who, **body: Any):
    body = {"name": "paper", "gpus": 1, "starts_at": at(1), "duration_s": 2 * HOUR, **body}
    return api.post("/v1/reservations", json=body, headers=who)


def test_booking_by_count_picks_free_gpus_and_by_id_takes_those(team):
    api, who = team
    first = book(api, who["ana"], users=["ana", "bo"])
    assert first.status_code == 201, first.text
    got = first.json()
    assert (got["gpu_indices"], got["owner"], got["users"], got["state"]) == (
        [0],
        "ana",
        ["ana", "bo"],
        "upcoming",
    )
    second = book(api, who["bo"], name="demo")
    assert second.status_code == 201 and second.json()["gpu_indices"] == [1]
    # Later, after both windows: GPU 0 by name.
    third = book(api, who["bo"], name="later", gpu_ids=[0], gpus=None, starts_at=at(5))
    assert third.status_code == 201 and third.json()["named"] is True
    listed = api.get("/v1/reservations", headers=who["bo"]).json()
    assert [r["name"] for r in listed] == ["paper", "demo", "later"]
    assert api.get("/v1/reservations/paper", headers=who["bo"]).json()["id"] == got["id"]
    assert api.get(f"/v1/reservations/{got['id']}", headers=who["bo"]).json()["name"] == "paper"


def test_a_clash_is_refused_naming_the_reservation(team):
    api, who = team
    assert book(api, who["ana"], gpus=2).status_code == 201
    clash = book(api, who["bo"], name="demo", starts_at=at(2))
    assert clash.status_code == 409
    assert clash.json()["detail"].startswith("GPUs 0-1 are reserved for paper (ana)")
    assert "0 of 2 GPUs are free of reservations then" in clash.json()["detail"]
    named = book(api, who["bo"], name="demo", gpu_ids=[1], gpus=None, starts_at=at(2.5))
    assert named.status_code == 409 and named.json()["detail"].startswith("GPU 1 is reserved")
    after = book(api, who["bo"], name="demo", starts_at=at(3))  # starts as paper ends
    assert after.status_code == 201, after.text
    same_name = book(api, who["bo"], starts_at=at(10))
    assert same_name.status_code == 409 and "named 'paper' is booked already" in same_name.text


def test_a_member_books_within_the_limit_and_an_admin_past_it(team):
    api, who = team
    assert book(api, who["ana"], gpus=2, duration_s=4 * HOUR).status_code == 201  # 8 GPU-h
    over = book(api, who["ana"], name="more", duration_s=3 * HOUR, starts_at=at(20))
    assert over.status_code == 403
    assert "this would hold 11.0 GPU-hours booked (8.0 already)" in over.json()["detail"]
    assert "GPUQ_MAX_RESERVED_GPU_HOURS is 10" in over.json()["detail"]
    admin = book(api, who["root"], name="big", gpus=2, duration_s=40 * HOUR, starts_at=at(20))
    assert admin.status_code == 201, admin.text


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"name": "Paper"}, "name", "pattern"),
        ({"gpus": None}, "body", "give `gpus` (how many) or `gpu_ids` (which)"),
        ({"gpu_ids": [0, 0], "gpus": None}, "body", "names a GPU twice"),
        ({"gpu_ids": [5], "gpus": None}, "gpu_ids", "this box has no GPU 5"),
        ({"gpus": 3}, "gpus", "this box has 2 GPUs"),
        ({"starts_at": "2026-12-04T09:00:00"}, "starts_at", "timezone"),
        ({"starts_at": at(-1)}, "starts_at", "starts_at is in the past"),
        ({"duration_s": None}, "body", "give `ends_at` or `duration_s`"),
        ({"duration_s": None, "ends_at": at(0.5)}, "body", "must come after `starts_at`"),
        ({"duration_s": 400 * 86400}, "duration_s", "less than or equal"),
        ({"group": "no-such-group-here"}, "group", "no Unix group"),
        ({"users": ["bad name"]}, "users", "pattern"),
        ({"surprise": 1}, "surprise", "Extra inputs"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(team, body, field, words):
    api, who = team
    response = book(api, who["ana"], **body)
    assert response.status_code == 422, response.text
    assert field in response.text and words in response.text


def test_only_its_owner_or_an_admin_changes_or_deletes_it(team):
    api, who = team
    booked = book(api, who["ana"]).json()
    assert (
        api.patch(
            "/v1/reservations/paper", json={"duration_s": HOUR}, headers=who["bo"]
        ).status_code
        == 403
    )
    longer = api.patch("/v1/reservations/paper", json={"duration_s": 3 * HOUR}, headers=who["ana"])
    assert longer.status_code == 200, longer.text
    ends = datetime.fromisoformat(longer.json()["ends_at"])
    assert ends - datetime.fromisoformat(booked["starts_at"]) == timedelta(hours=3)
    users_changed = api.patch("/v1/reservations/paper", json={"users": ["bo"]}, headers=who["root"])
    assert users_changed.json()["users"] == ["bo"]
    empty = api.patch("/v1/reservations/paper", json={}, headers=who["ana"])
    assert empty.status_code == 422 and "nothing to change" in empty.text
    assert api.delete("/v1/reservations/paper", headers=who["bo"]).status_code == 403
    gone = api.delete("/v1/reservations/paper", headers=who["ana"])
    assert gone.status_code == 200
    assert (gone.json()["state"], gone.json()["released_why"]) == ("released", "deleted by ana")
    again = api.delete(f"/v1/reservations/{booked['id']}", headers=who["ana"])
    assert again.status_code == 409 and "is over (deleted by ana)" in again.text
    assert api.get("/v1/reservations", headers=who["ana"]).json() == []
    assert [
        r["state"] for r in api.get("/v1/reservations?all=true", headers=who["ana"]).json()
    ] == ["released"]
    assert api.get("/v1/reservations/nope", headers=who["ana"]).status_code == 404
    trail = [e["action"] for e in api.get("/v1/audit", headers=who["root"]).json()["entries"]]
    assert {"reserve", "change", "unreserve"} <= set(trail)
