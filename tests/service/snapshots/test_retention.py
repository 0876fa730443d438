"""Unused snapshots are removed after GPUQ_SNAPSHOT_RETENTION_DAYS, file and record; those
a job queued or running names, or one that ended within the period, or that a job started
on recently, are kept. On SQLite and PostgreSQL: jobs are found by `command.snapshot`
inside their JSON spec."""

import os
import sys
import time
from datetime import timedelta

import pytest
from sqlmodel import update

from service.snapshots import collect_garbage, owns, retention, touch
from service.snapshots.store import folder_of
from service.store.db import utcnow
from service.store.tables import Job
from service.team import users
from tests.service.snapshots.tars import auth, make_tar, sha, store_entries, upload

pytestmark = pytest.mark.backends("sqlite", "postgres")

DAY = timedelta(days=1)


def snapshot_job(api, token: str, digest: str) -> int:
    spec = {
        "name": "snap",
        "kind": "command",
        "command": {"argv": [sys.executable, "-c", "pass"], "snapshot": digest},
        "resources": {"gpus": 1},
    }
    response = api.post("/v1/jobs", json=spec, headers=auth(token))
    assert response.status_code == 201, response.text
    return response.json()["id"]


def ended_at(api, token: str, job_id: int, when) -> None:
    """Cancels queued job `job_id` and dates its end `when`."""
    assert api.post(f"/v1/jobs/{job_id}/cancel", headers=auth(token)).status_code == 202
    with api.app.state.service.db.write() as session:
        session.exec(update(Job).where(Job.id == job_id).values(finished_at=when))


def test_only_unused_old_snapshots_are_removed(api, settings):
    db = api.app.state.service.db
    ana = users.add_user(db, "ana")
    tars = {name: make_tar({"train.py": name.encode()}) for name in ("unused", "queued",
            "recent", "ended_lately", "ended_long_ago")}  # fmt: skip
    digests = {name: sha(data) for name, data in tars.items()}
    for data in tars.values():
        assert upload(api, ana, data).status_code == 201
    now = utcnow() + timedelta(days=settings.snapshot_retention_days) + DAY  # all stored long ago

    snapshot_job(api, ana, digests["queued"])
    touch(db, digests["recent"], now - DAY)
    ended_at(api, ana, snapshot_job(api, ana, digests["ended_lately"]), now - DAY)
    ended_at(api, ana, snapshot_job(api, ana, digests["ended_long_ago"]), now - 40 * DAY)

    gone = collect_garbage(db, settings, now)
    assert gone == sorted([digests["unused"], digests["ended_long_ago"]])
    kept = ("queued", "recent", "ended_lately")
    assert store_entries(settings) == sorted(f"{digests[name]}.tar" for name in kept)
    assert [name for name in digests if owns(db, "ana", digests[name])] == list(kept)
    assert api.get(f"/v1/snapshots/{digests['unused']}", headers=auth(ana)).status_code == 404
    assert collect_garbage(db, settings, now) == []


def test_an_owners_head_keeps_an_old_snapshot_for_the_job_that_follows(api, settings):
    db = api.app.state.service.db
    ana = users.add_user(db, "ana")
    data = make_tar({"train.py": b"pass\n"})
    assert upload(api, ana, data).status_code == 201
    touch(db, sha(data), utcnow() - 60 * DAY)
    assert api.head(f"/v1/snapshots/{sha(data)}", headers=auth(ana)).status_code == 200
    in_a_day = utcnow() + DAY
    assert collect_garbage(db, settings, in_a_day) == []
    assert owns(db, "ana", sha(data))


def test_leftovers_of_a_crash_are_removed(api, settings):
    db = api.app.state.service.db
    ana = users.add_user(db, "ana")
    data = make_tar({"train.py": b"pass\n"})
    assert upload(api, ana, data).status_code == 201
    folder = folder_of(settings)
    stale, fresh, unrecorded = ".upload-dead.part", ".upload-busy.part", "9" * 64 + ".tar"
    for name in (stale, fresh, unrecorded):
        (folder / name).write_bytes(b"x")
    two_days_ago = time.time() - 2 * 86400
    for name in (stale, unrecorded):
        os.utime(folder / name, (two_days_ago, two_days_ago))
    assert collect_garbage(db, settings, utcnow()) == []
    assert store_entries(settings) == sorted([fresh, f"{sha(data)}.tar"])


def test_the_collector_runs_in_a_thread_of_its_own(api, settings, monkeypatch):
    db = api.app.state.service.db
    ana = users.add_user(db, "ana")
    data = make_tar({"train.py": b"pass\n"})
    assert upload(api, ana, data).status_code == 201
    monkeypatch.setattr(retention, "FIRST_AFTER_S", 0.0)
    monkeypatch.setattr(retention, "COLLECT_EVERY_S", 0.05)
    brief = settings.model_copy(update={"snapshot_retention_days": 0.5 / 86400})
    collector = retention.SnapshotCollector(db, brief)
    collector.start()
    try:
        deadline = time.monotonic() + 10
        while owns(db, "ana", sha(data)) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        collector.stop()
    assert not owns(db, "ana", sha(data))
    assert store_entries(settings) == []
