"""Group commit (`jobs.group_commit`): concurrent submissions share one commit, and each
gets its own answer, in submission order, as if it had been stored alone."""

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import OperationalError

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service import jobs
from service.errors import Conflict, Forbidden, Invalid, TooMany, Unavailable
from service.jobs.group_commit import Submissions
from service.jobs.submission import Limits, Stored, Submission, submission
from service.store.db import Database
from service.store.tables import AuditEntry, Job
from service.team.users import Caller
from tests.conftest import ANA, job_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")

BOB = Caller("bob", admin=False)


def spec(**overrides: Any) -> JobSpec:
    return JobSpec.model_validate(job_spec(**overrides))


@pytest.fixture
def submissions(db: Database) -> Iterator[Submissions]:
    submissions = Submissions(db)
    yield submissions
    submissions.close()


@pytest.fixture
def commits(db: Database) -> Iterator[list[int]]:
    """How many write transactions committed since the test began: `[n]`."""
    count = [0]

    def counted(_conn: Any) -> None:
        count[0] += 1

    event.listen(db.writer, "commit", counted)
    yield count
    event.remove(db.writer, "commit", counted)


@contextmanager
def listening(db: Database, name: str, handler: Callable[..., None]) -> Iterator[None]:
    event.listen(db.writer, name, handler)
    try:
        yield
    finally:
        event.remove(db.writer, name, handler)


@contextmanager
def write_lock_held(db: Database) -> Iterator[None]:
    """Another writer (as the scheduler) holds the write lock until the block ends: what
    is submitted meanwhile piles up. Its own transaction is one commit."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        with db.write() as session:
            session.connection()
            entered.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join()


def submit_in_order(
    pool: ThreadPoolExecutor, submissions: Submissions, items: list[Submission]
) -> list[Future[Stored]]:
    """Submits each item from a thread of its own, the next once the previous waits."""
    futures = []
    for count, item in enumerate(items, 1):
        futures.append(pool.submit(submissions.submit, item))
        deadline = time.monotonic() + 10
        while submissions.waiting() < count:
            assert time.monotonic() < deadline, "a submission never queued"
            time.sleep(0.001)
    return futures


def answers(futures: list[Future[Stored]]) -> list[Stored | BaseException]:
    return [f.exception(timeout=30) or f.result() for f in futures]


def count_rows(db: Database, model: type, *where: Any) -> int:
    with db.read() as session:
        return session.execute(select(func.count()).select_from(model).where(*where)).scalar_one()


def test_concurrent_submissions_share_one_commit_and_each_gets_its_own_job(
    db: Database, submissions: Submissions, commits: list[int]
):
    items = [submission(spec(name=f"j{i}"), ANA) for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        with write_lock_held(db):
            futures = submit_in_order(pool, submissions, items)
            time.sleep(0.05)
            assert not any(f.done() for f in futures), "answered before its commit"
        stored = answers(futures)
    assert commits[0] == 2, "the holder's commit and one for all eight submissions"
    assert all(isinstance(s, Stored) and s.created for s in stored)
    rows = [s.row for s in stored if isinstance(s, Stored)]
    assert [r["name"] for r in rows] == [f"j{i}" for i in range(8)]
    ids, revisions = [r["id"] for r in rows], [r["rev"] for r in rows]
    assert ids == sorted(ids) and len(set(ids)) == 8, "ids follow submission order"
    assert revisions == sorted(revisions) and len(set(revisions)) == 8
    for row in rows:
        assert jobs.read_job(db, row["id"]) == row, "the answer is the row as stored"
    assert count_rows(db, AuditEntry, AuditEntry.action == "submit") == 8


def test_a_mixed_batch_answers_each_submission_as_if_it_were_alone(
    db: Database, submissions: Submissions, commits: list[int]
):
    limits = Limits(max_jobs_queued=4)
    first, _ = submit_job(db, spec=spec(name="first"), caller=ANA, idempotency_key="k")
    cancelled, _ = submit_job(db, spec=spec(name="cancelled"), caller=ANA)
    jobs.cancel_job(db, cancelled.id, ANA)
    batch = [
        submission(spec(name="first"), ANA, "k", limits),  # 0: replay of `first`
        submission(spec(name="lost", depends_on=[first.id, 99999]), ANA, None, limits),  # 1
        submission(spec(name="good1"), ANA, None, limits),  # 2: ana's 2nd queued
        submission(spec(name="good2"), ANA, "new", limits),  # 3: ana's 3rd
        submission(spec(name="good2"), ANA, "new", limits),  # 4: replay of 3, same batch
        submission(spec(name="other"), ANA, "new", limits),  # 5: the key, another spec
        submission(spec(name="good3", depends_on=[first.id]), ANA, None, limits),  # 6: 4th
        submission(spec(name="over"), ANA, None, limits),  # 7: over ana's quota
        submission(spec(name="bobs"), BOB, None, limits),  # 8: bob's quota is his own
        submission(spec(name="doomed", depends_on=[cancelled.id]), ANA, None, limits),  # 9
    ]
    before = commits[0]
    with ThreadPoolExecutor(len(batch)) as pool:
        with write_lock_held(db):
            futures = submit_in_order(pool, submissions, batch)
        got = answers(futures)
    assert commits[0] - before == 2, "the holder's commit and one for the whole batch"

    replay = got[0]
    assert isinstance(replay, Stored) and not replay.created and replay.row["id"] == first.id
    missing = got[1]
    assert isinstance(missing, Invalid) and missing.loc == ("body", "depends_on", 1)
    assert "job 99999 does not exist" in missing.message
    created = {i: got[i] for i in (2, 3, 6, 8)}
    assert all(isinstance(s, Stored) and s.created for s in created.values()), got
    again = got[4]
    assert isinstance(again, Stored) and not again.created
    assert again.row == created[3].row  # type: ignore[union-attr]
    assert isinstance(got[5], Conflict) and "different job spec" in got[5].message
    assert isinstance(got[7], TooMany)
    assert got[7].message == "ana already has 4 queued jobs, the most allowed (max_jobs_queued=4)"
    doomed = got[9]
    assert isinstance(doomed, Invalid) and doomed.loc == ("body", "depends_on", 0)
    assert "already ended cancelled" in doomed.message

    queued = Job.status == JobStatus.queued
    assert count_rows(db, Job, queued, Job.owner == "ana") == 4
    assert count_rows(db, Job, queued, Job.owner == "bob") == 1
    assert count_rows(db, AuditEntry, AuditEntry.action == "submit") == 2 + 4


def test_submissions_awaited_on_an_event_loop_share_one_commit_and_never_stall_it(
    db: Database, submissions: Submissions, commits: list[int]
):
    """The checks (which may read files or ask Slurm) and the commit run in the storing
    thread: the loop that awaits them goes on meanwhile."""

    def slow_check() -> None:
        time.sleep(0.3)

    async def submit_four() -> tuple[list[Stored], float]:
        longest = 0.0  # between two turns of the loop
        with write_lock_held(db):
            items = [submission(spec(name=f"a{i}"), ANA) for i in range(4)]
            waiting = [
                asyncio.create_task(submissions.submit_async(item, slow_check)) for item in items
            ]
            last = start = time.monotonic()
            while time.monotonic() - start < 0.8:  # the checks take 1.2 s
                await asyncio.sleep(0.01)
                longest, last = max(longest, time.monotonic() - last), time.monotonic()
            assert submissions.waiting() == 4
            assert not any(task.done() for task in waiting), "answered before its commit"
        return list(await asyncio.gather(*waiting)), longest

    stored, longest = asyncio.run(submit_four())
    assert longest < 0.2, f"the loop stood still for {longest:.2f} s"
    assert [s.row["name"] for s in stored] == ["a0", "a1", "a2", "a3"]
    assert all(s.created for s in stored)
    assert commits[0] == 2, "the holder's commit and one for all four"


def test_checks_run_outside_the_write_lock_and_a_refusal_answers_its_submission_alone(
    db: Database, submissions: Submissions
):
    def refuse() -> None:
        raise Forbidden("not this one")

    items = [submission(spec(name=n), ANA) for n in ("a", "b")]
    with ThreadPoolExecutor(3) as pool:
        with write_lock_held(db):
            refused = pool.submit(submissions.submit, submission(spec(name="no"), ANA), refuse)
            assert isinstance(refused.exception(timeout=10), Forbidden), (
                "refused while another writer held the lock"
            )
            futures = submit_in_order(pool, submissions, items)
        got = answers(futures)
    assert [s.row["name"] for s in got if isinstance(s, Stored)] == ["a", "b"]
    assert count_rows(db, Job) == 2


def test_a_failed_commit_fails_exactly_its_batch_with_503(db: Database, submissions: Submissions):
    def mark(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO job"):
            conn.info["inserted_jobs"] = True

    def fail(conn: Any) -> None:
        if conn.info.pop("inserted_jobs", False):
            raise RuntimeError("the disk is on fire")

    with ThreadPoolExecutor(3) as pool:
        with listening(db, "before_cursor_execute", mark), listening(db, "commit", fail):
            with write_lock_held(db):
                futures = submit_in_order(
                    pool, submissions, [submission(spec(name=f"f{i}"), ANA) for i in range(3)]
                )
            failed = answers(futures)
        after = submissions.submit(submission(spec(name="after"), ANA))
    for error in failed:
        assert isinstance(error, Unavailable) and error.status_code == 503
        assert "the disk is on fire" in error.message
    assert after.created and after.row["name"] == "after"
    assert count_rows(db, Job) == 1, "nothing of the failed batch was stored"


def test_a_database_error_fails_the_batch_with_503_and_the_next_one_is_stored(
    db: Database, submissions: Submissions
):
    def refuse(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO job"):
            raise OperationalError(statement, {}, Exception("database or disk is full"))

    with ThreadPoolExecutor(3) as pool, listening(db, "before_cursor_execute", refuse):
        with write_lock_held(db):
            futures = submit_in_order(
                pool, submissions, [submission(spec(name=f"f{i}"), ANA) for i in range(3)]
            )
        failed = answers(futures)
    assert all(isinstance(e, Unavailable) and "disk is full" in e.message for e in failed)
    assert submissions.submit(submission(spec(name="next"), ANA)).created
    assert count_rows(db, Job) == 1


def test_one_submission_the_database_refuses_never_fails_the_others(
    db: Database, submissions: Submissions
):
    """An error that may be one submission's own (a value the database refuses) sends
    each submission of the batch through a transaction of its own."""

    def refuse_poison(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("INSERT INTO job") and "poison" in str(parameters):
            raise ValueError("a value the database refuses")

    names = ["a", "poison", "b"]
    with ThreadPoolExecutor(3) as pool, listening(db, "before_cursor_execute", refuse_poison):
        with write_lock_held(db):
            futures = submit_in_order(
                pool, submissions, [submission(spec(name=n), ANA) for n in names]
            )
        got = answers(futures)
    assert isinstance(got[1], Unavailable) and "refuses" in got[1].message
    assert [s.row["name"] for s in (got[0], got[2]) if isinstance(s, Stored)] == ["a", "b"]
    assert count_rows(db, Job) == 2


def test_a_closed_queue_stores_what_waits_and_refuses_the_rest(db: Database):
    submissions = Submissions(db)
    with ThreadPoolExecutor(2) as pool:
        with write_lock_held(db):
            futures = submit_in_order(
                pool, submissions, [submission(spec(name=f"w{i}"), ANA) for i in range(2)]
            )
            closing = threading.Thread(target=submissions.close)
            closing.start()
            time.sleep(0.05)
            with pytest.raises(Unavailable):
                submissions.submit(submission(spec(name="late"), ANA))
        closing.join(10)
        assert all(f.result(10).created for f in futures)


@pytest.mark.backends("sqlite")
def test_sqlite_commits_reach_the_disk_before_they_are_acknowledged(db: Database):
    with db.write_connection() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
