"""Tokens, ownership and admin rights, checked over every route the schema lists."""

import logging

import pytest

from service.store.db import Database
from service.team import users
from tests.conftest import job_spec, serving
from tests.service.snapshots.tars import make_tar

pytestmark = pytest.mark.backends("sqlite", "postgres")

PUBLIC = {("GET", "/healthz")}  # liveness stays open
#: Mutations that act on no one's job: a token is all they need.
OWNERLESS = {
    ("POST", "/v1/jobs"),
    ("POST", "/v1/sweeps"),
    ("POST", "/v1/snapshots"),
    ("POST", "/v1/reservations"),
}
#: ana's reservation, as the routes of `/v1/reservations/{key}` act on
RESERVATION = {"name": "paper", "gpus": 1, "starts_at": "2030-01-01T09:00:00Z", "duration_s": 600}
#: A sweep of one member, as the routes of `/v1/sweeps/{sweep_id}` act on.
SWEEP = job_spec(sweep={"parameters": {"keras.seed": [1]}})
#: Mutations of the caller's own settings: nobody can reach anyone else's.
OWN_SETTINGS = {("PUT", "/v1/webhook")}
#: Routes for admins only, whoever owns what.
ADMIN_ONLY = {
    ("POST", "/v1/gpus/{index}/release"),
    ("GET", "/v1/audit"),
    ("POST", "/v1/admin/drain"),
    ("POST", "/v1/admin/resume"),
}


@pytest.fixture
def team(api):
    db = api.app.state.service.db
    tokens = {
        "root": users.add_user(db, "root", admin=True),
        "ana": users.add_user(db, "ana"),
        "bo": users.add_user(db, "bo"),
    }
    return api, tokens


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def routes(api) -> list[tuple[str, str]]:
    schema = api.get("/openapi.json").json()
    return [(m.upper(), p) for p, methods in schema["paths"].items() for m in methods]


def call(api, method: str, path: str, token: str | None, job_id: int, sweep_id: int = 1):
    url = path.replace("{job_id}", str(job_id)).replace("{index}", "0")
    url = url.replace("{sweep_id}", str(sweep_id)).replace("{key}", RESERVATION["name"])
    body = {
        "POST /v1/jobs": job_spec(),
        "POST /v1/sweeps": SWEEP,
        "PATCH /v1/jobs/{job_id}": {"priority": -1},
        "POST /v1/reservations": RESERVATION | {"name": f"r{job_id}"},
        "PATCH /v1/reservations/{key}": {"duration_s": 1200},
    }.get(f"{method} {path}")
    headers = auth(token) if token else {}
    if (method, path) == ("POST", "/v1/snapshots"):  # a tar, not JSON
        return api.request(method, url, content=make_tar({"train.py": b"pass\n"}), headers=headers)
    return api.request(method, url, json=body, headers=headers)


def test_every_route_but_liveness_needs_a_token(team):
    api, tokens = team
    job_id = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"])).json()["id"]
    for method, path in routes(api):
        if (method, path) in PUBLIC:
            continue
        for bad in (None, "gpuq_not-a-real-token"):
            response = call(api, method, path, bad, job_id)
            assert response.status_code == 401, (method, path, response.text)
            assert response.headers["WWW-Authenticate"] == "Bearer"


def test_every_mutating_route_refuses_someone_elses_job(team):
    api, tokens = team
    mutating = [(m, p) for m, p in routes(api) if m in {"POST", "PATCH", "PUT", "DELETE"}]
    assert mutating, "the schema lists no mutating route"
    assert api.post("/v1/reservations", json=RESERVATION, headers=auth(tokens["ana"])).is_success
    for method, path in mutating:
        job_id = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"])).json()["id"]
        sweep_id = api.post("/v1/sweeps", json=SWEEP, headers=auth(tokens["ana"])).json()["id"]
        if (method, path) in OWNERLESS:
            assert call(api, method, path, tokens["bo"], job_id).status_code == 201
            continue
        if (method, path) in OWN_SETTINGS:
            continue  # tests/e2e/test_webhooks.py: each user's own webhook and secret
        response = call(api, method, path, tokens["bo"], job_id, sweep_id)
        assert response.status_code == 403, (method, path, response.text)
        if (method, path) not in ADMIN_ONLY:
            owned = "{job_id}" in path or "{sweep_id}" in path or "{key}" in path
            assert owned, f"{method} {path}: decide who may call it, in this test"
            detail = response.json()["detail"]
            assert "belongs to ana" in detail or "is ana's" in detail, detail


def test_admin_only_routes_refuse_users_and_serve_admins(team):
    api, tokens = team
    assert api.get("/v1/audit", headers=auth(tokens["ana"])).status_code == 403
    assert api.get("/v1/audit", headers=auth(tokens["root"])).status_code == 200
    response = api.post("/v1/gpus/0/release", headers=auth(tokens["ana"]))
    assert (response.status_code, response.json()["detail"]) == (403, "ana is not an admin")
    assert api.post("/v1/gpus/0/release", headers=auth(tokens["root"])).status_code == 409


def test_the_owner_is_the_tokens_user_and_cannot_be_claimed(team):
    api, tokens = team
    job = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["bo"])).json()
    assert job["owner"] == "bo"
    claimed = api.post("/v1/jobs", json=job_spec(owner="root"), headers=auth(tokens["bo"]))
    assert claimed.status_code == 422
    assert api.post(f"/v1/jobs/{job['id']}/cancel", headers=auth(tokens["bo"])).status_code == 202
    other = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"])).json()
    assert (
        api.post(f"/v1/jobs/{other['id']}/cancel", headers=auth(tokens["root"])).status_code == 202
    )


def test_a_revoked_token_stops_working(team):
    api, tokens = team
    users.revoke_user(api.app.state.service.db, "bo")
    assert api.get("/v1/jobs", headers=auth(tokens["bo"])).status_code == 401
    assert api.get("/v1/jobs", headers=auth(tokens["ana"])).status_code == 200


def test_users_changed_by_another_process_count_at_the_next_request(team, settings):
    # `gpuq users add|revoke` writes through a connection of its own, like this one.
    api, tokens = team
    assert api.get("/v1/jobs", headers=auth(tokens["bo"])).status_code == 200  # cached now
    other = Database.open(settings.db_url)
    try:
        users.revoke_user(other, "bo")
        cy = users.add_user(other, "cy")
    finally:
        other.dispose()
    assert api.get("/v1/jobs", headers=auth(tokens["bo"])).status_code == 401
    assert api.get("/v1/jobs", headers=auth(cy)).status_code == 200


def test_tokens_never_appear_in_responses_logs_or_the_database(team, caplog, settings):
    api, tokens = team
    with caplog.at_level(logging.DEBUG):
        seen = []
        job = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"]))
        seen.append(job.text)
        for path in ("/v1/jobs", f"/v1/jobs/{job.json()['id']}", "/v1/gpus", "/v1/audit"):
            seen.append(api.get(path, headers=auth(tokens["root"])).text)
        seen.append(api.get("/v1/jobs", headers=auth("gpuq_wrong")).text)
    stored = b"".join(p.read_bytes() for p in settings.home.glob("gpuq.db*"))
    everything = "\n".join(seen) + caplog.text + stored.decode(errors="replace")
    for token in tokens.values():
        assert token not in everything
        assert token.removeprefix("gpuq_") not in everything
    hashes = {u.name: u.token_sha256 for u in users.list_users(api.app.state.service.db)}
    assert hashes == {name: users.digest(token) for name, token in tokens.items()}


def test_priorities_only_admins_raise(team):
    api, tokens = team
    high = api.post("/v1/jobs", json=job_spec(priority=5), headers=auth(tokens["ana"]))
    assert high.status_code == 403
    assert "only an admin may set it" in high.json()["detail"]
    job_id = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"])).json()["id"]
    lower = api.patch(f"/v1/jobs/{job_id}", json={"priority": -3}, headers=auth(tokens["ana"]))
    assert (lower.status_code, lower.json()["priority"]) == (200, -3)
    raise_ = api.patch(f"/v1/jobs/{job_id}", json={"priority": 0}, headers=auth(tokens["ana"]))
    assert raise_.status_code == 403
    by_admin = api.patch(f"/v1/jobs/{job_id}", json={"priority": 50}, headers=auth(tokens["root"]))
    assert by_admin.json()["priority"] == 50
    audit = api.get("/v1/audit", headers=auth(tokens["root"])).json()["entries"]
    assert [(e["actor"], e["action"], e["detail"]) for e in audit[:2]] == [
        ("root", "priority", {"old": -3, "new": 50}),
        ("ana", "priority", {"old": 0, "new": -3}),
    ]


def test_every_mutation_is_audited(team):
    api, tokens = team
    ana = auth(tokens["ana"])
    job_id = api.post("/v1/jobs", json=job_spec(), headers=ana).json()["id"]
    api.post(f"/v1/jobs/{job_id}/hold", headers=ana)
    api.post(f"/v1/jobs/{job_id}/release", headers=ana)
    api.post(f"/v1/jobs/{job_id}/cancel", headers=ana)
    entries = api.get("/v1/audit", headers=auth(tokens["root"])).json()["entries"]
    assert [(e["actor"], e["action"], e["target"]) for e in entries[:4]] == [
        ("ana", "cancel", f"job/{job_id}"),
        ("ana", "release", f"job/{job_id}"),
        ("ana", "hold", f"job/{job_id}"),
        ("ana", "submit", f"job/{job_id}"),
    ]
    assert {e["action"] for e in entries} >= {"user_add"}


def test_a_queue_quota_answers_429(settings):
    with serving(settings.model_copy(update={"max_jobs_queued": 2}), schedule=False) as api:
        db = api.app.state.service.db
        tokens = {"ana": users.add_user(db, "ana"), "bo": users.add_user(db, "bo")}
        queue_three(api, tokens)


def queue_three(api, tokens: dict[str, str]) -> None:
    """ana's third queued job is one over GPUQ_MAX_JOBS_QUEUED=2; bo's first is his own."""
    for _ in range(2):
        assert api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"])).status_code == 201
    third = api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["ana"]))
    assert third.status_code == 429
    assert third.json()["detail"] == (
        "ana already has 2 queued jobs, the most allowed (max_jobs_queued=2)"
    )
    assert api.post("/v1/jobs", json=job_spec(), headers=auth(tokens["bo"])).status_code == 201


def test_hold_and_release_need_a_queued_job(team):
    api, tokens = team
    ana = auth(tokens["ana"])
    job_id = api.post("/v1/jobs", json=job_spec(), headers=ana).json()["id"]
    assert api.post(f"/v1/jobs/{job_id}/hold", headers=ana).json()["held"] is True
    assert api.post(f"/v1/jobs/{job_id}/release", headers=ana).json()["held"] is False
    api.post(f"/v1/jobs/{job_id}/cancel", headers=ana)
    again = api.post(f"/v1/jobs/{job_id}/hold", headers=ana)
    assert again.status_code == 409


def test_dependencies_must_exist_and_be_able_to_succeed(team):
    api, tokens = team
    ana = auth(tokens["ana"])
    missing = api.post("/v1/jobs", json=job_spec(depends_on=[99]), headers=ana)
    assert missing.status_code == 422
    assert missing.json()["detail"][0]["loc"] == ["body", "depends_on", 0]
    first = api.post("/v1/jobs", json=job_spec(), headers=ana).json()["id"]
    api.post(f"/v1/jobs/{first}/cancel", headers=ana)
    doomed = api.post("/v1/jobs", json=job_spec(depends_on=[first]), headers=ana)
    assert doomed.status_code == 422
    assert "already ended cancelled" in doomed.text


def test_me_says_who_the_token_is_and_whether_they_are_an_admin(team):
    api, tokens = team
    ana = api.get("/v1/me", headers=auth(tokens["ana"])).json()
    assert ana == {"name": "ana", "admin": False, "unix_user": None}
    assert api.get("/v1/me", headers=auth(tokens["root"])).json()["admin"] is True
    assert api.get("/v1/me").status_code == 401
