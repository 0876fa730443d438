"""The usage report, pure: attempts cut at the period's edges and at UTC midnights, lost
GPU time at an attempt's end, waits of attempts that started inside, shares of the box,
and a member's view."""

from datetime import UTC, date, datetime, timedelta

import pytest

from service.usage.report import Ended, Held, Period, build

T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
H = timedelta(hours=1)
#: 10:00 to 20:00 on one day
DAYTIME = Period(T0, T0 + 10 * H)


def held(owner="ana", gpus=1, start=0.0, end=1.0, wait=0.0, on=(), **kwargs) -> Held:
    """An attempt from `start` to `end` hours after T0, launched `wait` hours after it
    could start."""
    return Held(
        owner=owner,
        gpus=gpus,
        gpu_indices=tuple(on),
        queued_at=T0 + (start - wait) * H,
        started_at=T0 + start * H,
        ended_at=T0 + end * H,
        **kwargs,
    )


def test_attempts_count_only_their_part_inside_the_period():
    attempts = [
        held(gpus=2, start=-1, end=0.5),  # from before: half an hour on 2 GPUs
        held(gpus=1, start=9.5, end=12),  # past the end: half an hour
        held(gpus=4, start=-3, end=-1),  # over before it began
        held(gpus=1, start=10, end=11),  # starts at the (excluded) end
        held(gpus=3, start=-1, end=11),  # across the whole period: 10 h on 3 GPUs
    ]
    report = build(DAYTIME, "owner", attempts, [], gpu_count=4)
    assert report.total.gpu_hours == pytest.approx(1 + 0.5 + 30)
    assert [r.owner for r in report.rows] == ["ana"]
    assert report.rows[0].gpu_hours == report.total.gpu_hours
    assert report.total.queue_wait.attempts == 1, "only the one launched at 19:30 is inside"


def test_a_day_row_holds_the_part_of_each_attempt_on_that_utc_day():
    since = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    period = Period(since, since + 48 * H)  # noon to noon, over three UTC days
    # 23:00 on the 20th to 02:00 on the 22nd on 2 GPUs
    night = Held("ana", 2, (), since + 10 * H, since + 11 * H, since + 38 * H)
    report = build(period, "day", [night], [], gpu_count=2)
    assert [r.day for r in report.rows] == [date(2026, 11, d) for d in (20, 21, 22)]
    assert [r.gpu_hours for r in report.rows] == [2.0, 48.0, 4.0]
    # Each day's share is of that day's part of the period: 12 h, 24 h and 12 h of 2 GPUs.
    assert [r.share for r in report.rows] == pytest.approx([2 / 24, 1.0, 4 / 24], abs=1e-6)
    assert report.total.gpu_hours == 54.0
    assert report.total.share == pytest.approx(54 / 96, abs=1e-6)


def test_shares_are_of_the_whole_box_over_the_period_and_add_up():
    attempts = [
        held("ana", gpus=2, start=0, end=5, on=(0, 1)),  # 10 GPU-hours
        held("bo", gpus=1, start=2, end=7, on=(1,)),  # 5
        held("cy", gpus=1, start=1, end=3),  # 2 on GPUs not known (Slurm)
    ]
    by_owner = build(DAYTIME, "owner", attempts, [], gpu_count=4)
    assert [(r.owner, r.gpu_hours, r.share) for r in by_owner.rows] == [
        ("ana", 10.0, 0.25),
        ("bo", 5.0, 0.125),
        ("cy", 2.0, 0.05),
    ]
    assert by_owner.total.share == pytest.approx(17 / 40, abs=1e-6)
    by_gpu = build(DAYTIME, "gpu", attempts, [], gpu_count=4)
    assert [(r.gpu, r.gpu_hours) for r in by_gpu.rows] == [
        (0, 5.0),
        (1, 10.0),
        (2, 0.0),  # idle GPUs are listed too
        (3, 0.0),
        (None, 2.0),
    ]
    assert sum(r.share or 0 for r in by_gpu.rows) == pytest.approx(by_gpu.total.share, abs=1e-5)


def test_no_gpus_known_means_no_share():
    report = build(DAYTIME, "owner", [held(gpus=1)], [], gpu_count=0)
    assert (report.total.share, report.rows[0].share) == (None, None)
    assert report.total.gpu_hours == 1.0


def test_lost_gpu_time_is_the_end_of_an_attempt_and_is_cut_at_the_edge_too():
    attempts = [
        # preempted at 10:05 on 2 GPUs, its last 10 minutes lost: 5 of them are inside
        held("ana", gpus=2, start=-1, end=5 / 60, lost_gpu_seconds=1200, lost_to="preemptions"),
        # a job's last attempt failed: all of it is lost
        held("bo", gpus=1, start=1, end=3, lost_gpu_seconds=7200, lost_to="failures"),
        held("bo", gpus=1, start=4, end=5),  # succeeded: nothing lost
    ]
    report = build(DAYTIME, "owner", attempts, [], gpu_count=2)
    lost = {r.owner: r.lost_gpu_hours for r in report.rows}
    assert lost["ana"].preemptions == pytest.approx(600 / 3600, abs=1e-6)
    assert (lost["ana"].failures, lost["bo"].preemptions) == (0.0, 0.0)
    assert lost["bo"].failures == 2.0
    assert report.total.lost_gpu_hours.failures == 2.0
    assert report.total.lost_gpu_hours.preemptions == pytest.approx(1 / 6, abs=1e-6)


def test_queue_waits_are_of_attempts_started_inside_with_interpolated_percentiles():
    waits_h = [0, 10 / 3600, 20 / 3600, 30 / 3600, 100 / 3600]
    attempts = [held(start=1 + i, end=1.5 + i, wait=w) for i, w in enumerate(waits_h)]
    attempts.append(held(start=-1, end=2, wait=5))  # started before the period: not counted
    wait = build(DAYTIME, "owner", attempts, [], gpu_count=1).total.queue_wait
    assert wait.attempts == 5
    assert wait.median_s == pytest.approx(20)
    assert wait.p95_s == pytest.approx(30 + 0.8 * 70)


def test_jobs_count_by_the_state_they_ended_in_where_and_when_they_ended():
    ended = [
        Ended("ana", "succeeded", (0,), T0 + H),
        Ended("ana", "failed", (0, 1), T0 + 2 * H),
        Ended("bo", "cancelled", (), T0 + 3 * H),  # cancelled while queued: no GPU
        Ended("bo", "timed_out", (1,), T0 - H),  # before the period
        Ended("bo", "succeeded", (1,), T0 + 10 * H),  # at the (excluded) end
    ]
    report = build(DAYTIME, "owner", [], ended, gpu_count=2)
    assert report.total.jobs.model_dump() == {
        "succeeded": 1,
        "failed": 1,
        "cancelled": 1,
        "timed_out": 0,
    }
    rows = {r.owner: r.jobs for r in report.rows}
    assert (rows["ana"].succeeded, rows["ana"].failed, rows["bo"].cancelled) == (1, 1, 1)
    by_gpu = build(DAYTIME, "gpu", [], ended, gpu_count=2)
    assert [(r.gpu, r.jobs.succeeded, r.jobs.failed) for r in by_gpu.rows] == [
        (0, 1, 1),
        (1, 0, 1),
    ]


def test_a_member_sees_rows_of_their_own_work_and_the_teams_total():
    attempts = [
        held("ana", gpus=1, start=0, end=2, on=(0,)),
        held("bo", gpus=2, start=0, end=3, on=(0, 1)),
    ]
    ended = [Ended("ana", "succeeded", (0,), T0 + 2 * H), Ended("bo", "failed", (0, 1), T0 + 3 * H)]
    by_owner = build(DAYTIME, "owner", attempts, ended, gpu_count=2, rows_of="ana")
    assert [(r.owner, r.gpu_hours) for r in by_owner.rows] == [("ana", 2.0)]
    assert by_owner.rows_of == "ana"
    assert by_owner.total.gpu_hours == 8.0
    assert by_owner.total.jobs.failed == 1
    by_gpu = build(DAYTIME, "gpu", attempts, ended, gpu_count=2, rows_of="ana")
    assert [(r.gpu, r.gpu_hours, r.jobs.failed) for r in by_gpu.rows] == [(0, 2.0, 0), (1, 0.0, 0)]
    by_day = build(DAYTIME, "day", attempts, ended, gpu_count=2, rows_of="ana")
    assert [(r.day, r.gpu_hours) for r in by_day.rows] == [(T0.date(), 2.0)]
    idle = build(DAYTIME, "owner", attempts, ended, gpu_count=2, rows_of="cy")
    assert [(r.owner, r.gpu_hours) for r in idle.rows] == [("cy", 0.0)], "their row, empty"
    assert idle.total.gpu_hours == 8.0
