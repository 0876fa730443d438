"""Webhooks without a network: signing, the back-off schedule, queueing state changes and
recording attempts, on a real database."""

import hashlib
import hmac
import json
import logging
from datetime import timedelta

import pytest
from sqlmodel import col, select

from gpuq.contract.outcome import Outcome
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from gpuq.http import Client
from service import jobs
from service.addresses import AllowList
from service.cli.main import main
from service.jobs import writes
from service.jobs.privacy import as_seen_by
from service.public import JobPublic
from service.store.db import Database, utcnow
from service.store.tables import Job, UserWebhook, WebhookDelivery
from service.team.users import Caller
from service.webhooks import change_webhook, queue_event, read_webhook, sign, verify
from service.webhooks.delivery import due, record_delivery_attempt, redelivery_delay_s
from service.webhooks.queue import queue_changes
from service.webhooks.signing import encode, headers
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

HOOK = "http://127.0.0.1:9/hook/s3cr3t-path"
#: Webhooks here name 127.0.0.1, as an admin's internal receiver (test_addresses: others).
LOOPBACK = AllowList.parse("127.0.0.1/32")


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"webhook_allow": "127.0.0.1/32"})


def make(db: Database, caller: Caller = ANA, **overrides) -> int:
    spec = JobSpec.model_validate(job_spec(**overrides))
    job, _ = submit_job(db, spec=spec, caller=caller)
    assert job.id is not None
    return job.id


def move(db: Database, job_id: int, to: JobStatus) -> None:
    with db.write() as session:
        assert jobs.transition(session, job_id, to)


def notify(db: Database) -> list[str]:
    """Queues every state change not yet queued; the events of all deliveries so far."""
    since, more = 0, True
    while more:
        with db.write() as session:
            since, more = queue_changes(session, since)
    return [d.event for d in deliveries(db)]


def deliveries(db: Database) -> list[WebhookDelivery]:
    with db.read() as session:
        query = select(WebhookDelivery).order_by(col(WebhookDelivery.id))
        return list(session.exec(query).all())


def attempt(status_code: int | None, error: str | None = None) -> dict:
    at = utcnow().isoformat()
    return {"at": at, "status_code": status_code, "error": error, "duration_ms": 3}


def test_the_signature_is_hmac_sha256_of_the_exact_body():
    body = encode({"b": 1, "a": "café"})
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert sign("s3cret", body) == expected
    assert verify("s3cret", body, expected)
    assert not verify("other", body, expected)
    assert not verify("s3cret", body + b" ", expected)
    sent = headers("succeeded", 7, expected)
    assert sent["X-Gpuq-Signature"] == expected
    assert (sent["X-Gpuq-Event"], sent["X-Gpuq-Delivery"]) == ("succeeded", "7")
    assert (sent["Content-Type"], sent["User-Agent"]) == ("application/json", "gpuq")


def test_retries_back_off_doubling_up_to_a_cap():
    assert [redelivery_delay_s(n, 2.0) for n in range(1, 11)] == [
        2,
        4,
        8,
        16,
        32,
        64,
        128,
        256,
        300,
        300,
    ]
    assert redelivery_delay_s(3, 0.2) == pytest.approx(0.8)


def test_a_preempted_job_queued_again_is_announced_as_preempted(db):
    job_id = make(db, webhook=HOOK)
    move(db, job_id, JobStatus.starting)
    move(db, job_id, JobStatus.running)
    assert notify(db) == ["running"]
    said = "preempted by job 9, which needed its GPUs; it is queued again and resumes ..."
    with db.write() as session:
        requeued = writes.requeue(
            session,
            job_id,
            Outcome(JobStatus.queued, Reason.preempted, said, 75),
            [],
            0.0,
            attempt=1,
            last_epoch=2,
            previous_attempts=[],
            preempted_by=9,
        )
    assert requeued
    assert notify(db) == ["running", "preempted"]
    job = jobs.get_job(db, job_id)
    assert (job.status, job.preemptions, job.preempted_by) == (JobStatus.queued, 1, 9)
    assert job.previous_attempts[0]["reason"] == "preempted"
    assert job.previous_attempts[0]["preempted_by"] == 9
    # A retry after a failure is still announced as `queued`.
    move(db, job_id, JobStatus.starting)
    move(db, job_id, JobStatus.running)
    notify(db)
    with db.write() as session:
        failed = Outcome(JobStatus.failed, Reason.signal, "killed", None)
        writes.requeue(
            session,
            job_id,
            failed,
            [],
            0.0,
            attempt=2,
            last_epoch=None,
            previous_attempts=job.previous_attempts,
        )
    assert notify(db)[-1] == "queued"


@pytest.mark.backends("sqlite", "postgres")
def test_a_job_without_a_webhook_queues_nothing(db):
    job_id = make(db)
    with db.write() as session:
        queue_event(session, session.get(Job, job_id), "idle")
    move(db, job_id, JobStatus.starting)
    assert notify(db) == []
    with db.read() as session:
        assert session.get(UserWebhook, ANA.name) is None  # no secret made for nothing


@pytest.mark.backends("sqlite", "postgres")
def test_an_event_carries_the_job_and_is_due_at_once(db):
    job_id = make(db, webhook=HOOK)
    with db.write() as session:
        queue_event(session, session.get(Job, job_id), "idle")
    [delivery] = deliveries(db)
    assert (delivery.event, delivery.state, delivery.url, delivery.owner) == (
        "idle",
        "pending",
        HOOK,
        "ana",
    )
    assert delivery.body["event"] == "idle"
    assert delivery.body["delivery"] == delivery.id
    assert delivery.body["job"]["id"] == job_id
    assert delivery.body["job"]["spec"]["webhook"] == HOOK
    assert [d.id for d in due(db, 10)] == [delivery.id]
    assert due(db, 10, skip=[delivery.id]) == []
    assert read_webhook(db, ANA).secret  # made with the first delivery
    with db.write() as session:
        job = session.get(Job, job_id)
        assert jobs.transition(session, job_id, JobStatus.starting)  # behind the ORM's back
        queue_event(session, job, "idle")
    assert deliveries(db)[-1].body["job"]["status"] == "starting"


@pytest.mark.backends("sqlite", "postgres")
def test_the_owners_default_applies_unless_the_spec_names_its_own(db):
    first = read_webhook(db, ANA)
    assert first.url is None and len(first.secret) >= 40
    change_webhook(db, ANA, url="http://127.0.0.1:9/default", allow=LOOPBACK)
    assert read_webhook(db, ANA).secret == first.secret
    by_default, own = make(db), make(db, webhook=HOOK)
    assert jobs.get_job(db, by_default).webhook_url == "http://127.0.0.1:9/default"
    assert jobs.get_job(db, own).webhook_url == HOOK
    rotated = change_webhook(db, ANA, rotate_secret=True)
    assert rotated.url == "http://127.0.0.1:9/default" and rotated.secret != first.secret
    assert change_webhook(db, ANA, url=None).url is None
    assert jobs.get_job(db, make(db)).webhook_url is None


@pytest.mark.backends("sqlite", "postgres")
def test_each_state_change_is_queued_once_but_not_the_first_queued(db):
    job_id = make(db, webhook=HOOK)
    assert notify(db) == []
    assert jobs.get_job(db, job_id).notified_status == "queued"
    move(db, job_id, JobStatus.starting)
    assert notify(db) == ["starting"]
    assert notify(db) == ["starting"]
    move(db, job_id, JobStatus.queued)  # queued again, as for a retry: announced
    move(db, job_id, JobStatus.starting)
    move(db, job_id, JobStatus.running)  # two changes between looks: one delivery, as now
    move(db, job_id, JobStatus.queued)
    assert notify(db) == ["starting", "queued"]
    move(db, job_id, JobStatus.starting)
    move(db, job_id, JobStatus.running)
    move(db, job_id, JobStatus.succeeded)
    assert notify(db) == ["starting", "queued", "succeeded"]
    body = deliveries(db)[-1].body
    assert body["job"]["status"] == "succeeded"


@pytest.mark.backends("sqlite", "postgres")
def test_the_cursor_finds_changes_after_it_and_batches(db, monkeypatch):
    monkeypatch.setattr("service.webhooks.queue.BATCH", 2)
    ids = [make(db, webhook=HOOK) for _ in range(5)]
    notify(db)
    for job_id in ids:
        move(db, job_id, JobStatus.starting)
    assert notify(db) == ["starting"] * 5
    with db.write() as session:
        since, more = queue_changes(session, 0)
    assert (more, len(deliveries(db))) == (False, 5)
    move(db, ids[0], JobStatus.cancelled)
    with db.write() as session:
        assert queue_changes(session, since)[1] is False
    assert [d.event for d in deliveries(db)][-1] == "cancelled"


@pytest.mark.backends("sqlite", "postgres")
def test_a_failed_attempt_is_retried_later_and_given_up_after_the_last(db, caplog):
    job_id = make(db, webhook=HOOK)
    with db.write() as session:
        queue_event(session, session.get(Job, job_id), "idle")
        queue_event(session, session.get(Job, job_id), "idle")
    first, second = (d.id for d in deliveries(db))
    with caplog.at_level(logging.WARNING):
        assert (
            record_delivery_attempt(db, first, attempt(500), attempts=2, backoff_s=60) == "pending"
        )
    [row] = [d for d in deliveries(db) if d.id == first]
    assert row.next_at > utcnow() + timedelta(seconds=50)
    assert due(db, 10) == [d for d in deliveries(db) if d.id == second]
    failed = record_delivery_attempt(
        db, first, attempt(None, "ReadTimeout"), attempts=2, backoff_s=60
    )
    assert failed == "failed"
    [row] = [d for d in deliveries(db) if d.id == first]
    assert [a["status_code"] for a in row.attempts] == [500, None]
    assert row.finished_at is not None and row.next_at is None
    assert (
        record_delivery_attempt(db, second, attempt(204), attempts=2, backoff_s=60) == "delivered"
    )
    assert f"job {job_id}: webhook delivery {first} to 127.0.0.1: answered 500" in caplog.text
    assert "s3cr3t-path" not in caplog.text  # the URL's host only


def test_only_the_owner_and_admins_see_a_jobs_webhook_url(db, settings):
    job = JobPublic.of(jobs.get_job(db, make(db, webhook=HOOK)))
    assert as_seen_by(ANA, job, settings).spec.webhook == HOOK
    assert as_seen_by(Caller("root", admin=True), job, settings).spec.webhook == HOOK
    hidden = as_seen_by(Caller("bo", admin=False), job, settings)
    assert hidden.spec.webhook is None and job.spec.webhook == HOOK


def test_the_cli_shows_sets_rotates_and_clears_the_default(api, capsys):
    def gpuq(*args: str) -> int:
        return main(list(args), api=Client(http=api))

    def answer() -> dict:
        return json.loads(capsys.readouterr().out)

    assert gpuq("webhook", "--json") == 0
    shown = answer()
    assert shown["url"] is None
    assert gpuq("webhook", "http://127.0.0.1:9/hook") == 0
    assert capsys.readouterr().out.splitlines() == [
        "url:    http://127.0.0.1:9/hook",
        f"secret: {shown['secret']}",
    ]
    assert gpuq("webhook", "--rotate-secret", "--json") == 0
    rotated = answer()
    assert rotated["url"] == "http://127.0.0.1:9/hook" and rotated["secret"] != shown["secret"]
    assert gpuq("webhook", "--clear", "--json") == 0
    assert answer() == {"url": None, "secret": rotated["secret"]}
    assert gpuq("webhook", "http://127.0.0.1:9/hook", "--clear") == 2
    assert gpuq("webhook", "ftp://127.0.0.1/hook") == 1
    assert "http:// or https://" in capsys.readouterr().err
