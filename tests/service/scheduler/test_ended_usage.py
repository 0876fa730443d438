import math
import random
from datetime import UTC, datetime

import pytest
from sqlalchemy import update

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus
from service.jobs.writes import JOB
from service.scheduler.ended_usage import HORIZON_HALF_LIVES, REBASE_HALF_LIVES, EndedUsage
from service.scheduler.fairshare import Interval, decayed_usage
from service.store.db import Database
from service.team.users import Caller
from tests.conftest import command_spec
from tests.submitting import submit_job

pytestmark = pytest.mark.backends("sqlite", "postgres")

HALF_LIFE_S = 3600.0
OWNERS = ("ana", "bo", "cy")


def ended(db: Database, owner: str, gpus: int, start: float, end: float) -> int:
    """A job of `owner`'s that held `gpus` GPUs from `start` to `end` and succeeded."""
    spec = JobSpec.model_validate(command_spec("pass", gpus=gpus))
    job, _ = submit_job(db, spec=spec, caller=Caller(owner, admin=False))
    moments = {
        "started_at": datetime.fromtimestamp(start, UTC),
        "finished_at": datetime.fromtimestamp(end, UTC),
    }
    with db.write() as session:
        statement = update(JOB).where(JOB.c.id == job.id)
        session.connection().execute(statement.values(status=JobStatus.succeeded, **moments))
    return int(job.id)


def read(db: Database, usage: EndedUsage, now: float) -> dict[str, float]:
    with db.read() as session:
        return usage.read(session.connection(), now)


def assert_same(got: dict[str, float], expected: dict[str, float]) -> None:
    assert got.keys() == expected.keys()
    for owner, seconds in expected.items():
        assert got[owner] == pytest.approx(seconds, rel=1e-9, abs=1e-9), owner


def test_the_usage_kept_from_plan_to_plan_is_the_usage_of_every_ended_job_read_whole(db):
    """Jobs end now and then, long and short, some before the horizon, some never holding
    their GPUs; time passes over several rebases and horizons. At every plan, what the
    kept usage says is `decayed_usage` over the jobs that ended within the horizon."""
    rng = random.Random(31)
    kept = EndedUsage(HALF_LIFE_S)
    now = 1_800_000_000.0
    intervals: list[Interval] = []
    for _ in range(40):
        for _ in range(rng.randint(0, 4)):
            owner, gpus = rng.choice(OWNERS), rng.randint(1, 2)
            end = now - rng.choice([0, rng.randint(1, 25 * int(HALF_LIFE_S))])
            start = end - rng.choice([0, rng.randint(1, 3 * int(HALF_LIFE_S))])
            ended(db, owner, gpus, start, end)
            intervals.append(Interval(owner, gpus, start, end))
        now += rng.randint(0, 3 * int(HALF_LIFE_S))
        horizon = now - HORIZON_HALF_LIVES * HALF_LIFE_S
        expected = decayed_usage([i for i in intervals if i.end > horizon], now, HALF_LIFE_S)
        assert_same(read(db, kept, now), expected)
        assert_same(read(db, EndedUsage(HALF_LIFE_S), now), expected)  # read whole
    assert now - 1_800_000_000.0 > 2 * REBASE_HALF_LIVES * HALF_LIFE_S  # it rebased


def test_a_job_counts_once_however_often_its_row_changes_and_leaves_at_the_horizon(db):
    kept = EndedUsage(HALF_LIFE_S)
    now = 1_800_000_000.0
    job = ended(db, "ana", 2, now - HALF_LIFE_S, now)
    assert read(db, kept, now) == {"ana": pytest.approx(2 * HALF_LIFE_S / 2 / math.log(2))}
    for name in ("renamed", "again"):
        with db.write() as session:
            statement = update(JOB).where(JOB.c.id == job).values(name=name)
            session.connection().execute(statement)
        assert read(db, kept, now) == {"ana": pytest.approx(HALF_LIFE_S / math.log(2))}
    ended(db, "bo", 1, now - 10, now - 10)  # held its GPU no time at all: not counted
    assert read(db, kept, now).keys() == {"ana"}
    past = now + HORIZON_HALF_LIVES * HALF_LIFE_S
    assert read(db, kept, past - 1).keys() == {"ana"}
    assert read(db, kept, past) == {}  # exactly gone, not a remainder of subtractions
