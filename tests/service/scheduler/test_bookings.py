"""Reservations in the plan: who may take a reservation's GPUs, when, and what a job kept
off them is told."""

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from service.scheduler.bookings import Booking, as_span, gpu_list, label, window_text
from service.scheduler.placement import Claim, GpuSlot, Request, plan

HOUR = 3600.0
NOW = datetime(2026, 12, 4, 6, 50, tzinfo=UTC).timestamp()
GPUS = [GpuSlot(i, 8192) for i in range(4)]


def paper(starts_in_s: float = 2 * HOUR + 10 * 60, hours: float = 8) -> Booking:
    """GPUs 0 and 1 for ana and bo, from 09:00 (in 2 h 10 min) to 17:00."""
    starts = NOW + starts_in_s
    ends = starts + hours * HOUR
    return Booking(
        "paper",
        frozenset({0, 1}),
        starts,
        ends,
        frozenset({"ana", "bo"}),
        label("paper", ["ana", "bo"], None, starts, ends, NOW),
    )


def job(job_id: int, owner: str, gpus: int = 1, **kw) -> Request:
    return Request(job_id, 0, gpus, owner=owner, **kw)


def placed(queue, bookings, held=(), gpus=GPUS, **kw):
    result = plan(queue, gpus, list(held), now=NOW, bookings=bookings, **kw)
    return {p.job_id: p.gpu_indices for p in result.placements}, result.waiting


def test_an_outsider_with_no_time_limit_is_kept_off_a_booked_gpu_and_told_why():
    # GPUs 2 and 3 are busy: only the booked ones are idle.
    busy = [Claim(8, 2, None), Claim(9, 3, None)]
    where, why = placed([job(1, "cy")], [paper()], busy)
    assert where == {}
    assert why[1] == (
        "GPUs 0-1 are reserved for paper (ana, bo) 09:00-17:00 UTC; "
        "a job with --time under 2h9m would start now"
    )


def test_an_outsider_whose_time_limit_ends_before_the_window_backfills():
    busy = [Claim(8, 2, None), Claim(9, 3, None)]
    short = job(1, "cy", time_limit_s=2 * HOUR)
    too_long = job(2, "cy", time_limit_s=3 * HOUR)
    where, why = placed([short, too_long], [paper()], busy)
    assert where == {1: (0,)}
    assert why[2].startswith("GPU 1 is reserved for paper") or "GPUs 0-1" in why[2]
    # With the grace a stop may take counted: 2 h 9 min plus 5 min passes the opening.
    where, _ = placed([job(3, "cy", time_limit_s=2 * HOUR + 9 * 60)], [paper()], busy, grace_s=300)
    assert where == {}


def test_nobody_else_takes_an_open_window_even_for_a_minute():
    busy = [Claim(8, 2, None), Claim(9, 3, None)]
    where, why = placed([job(1, "cy", time_limit_s=60)], [paper(starts_in_s=-HOUR)], busy)
    assert where == {}
    assert why[1] == "GPUs 0-1 are reserved for paper (ana, bo) 05:50-13:50 UTC"


def test_an_outsider_takes_ordinary_gpus_first_without_being_told_of_the_reservation():
    where, why = placed([job(1, "cy", gpus=2)], [paper(starts_in_s=-HOUR)])
    assert where == {1: (2, 3)}
    where, why = placed([job(1, "cy", gpus=3)], [paper(starts_in_s=-HOUR)])
    assert where == {} and why[1].startswith("GPUs 0-1 are reserved for paper")


def test_a_member_is_placed_in_an_open_reservation_first():
    where, _ = placed([job(1, "ana"), job(2, "cy"), job(3, "bo")], [paper(starts_in_s=-1)])
    assert where == {1: (0,), 2: (2,), 3: (1,)}


def test_a_member_without_room_in_it_runs_on_ordinary_gpus():
    where, _ = placed([job(1, "ana", gpus=3)], [paper(starts_in_s=-1)])
    assert where == {1: (0, 1, 2)}


def test_a_member_may_run_into_the_window_before_it_opens():
    busy = [Claim(8, 2, None), Claim(9, 3, None)]
    where, _ = placed([job(1, "bo")], [paper()], busy)
    assert where == {1: (0,)}


def test_a_job_naming_the_reservation_waits_for_its_window_then_takes_only_its_gpus():
    named = job(1, "ana", gpus=2, reservation="paper")
    where, why = placed([named], [paper()])
    assert (
        where == {} and why[1] == "waiting for reservation paper (ana, bo) 09:00-17:00 UTC to open"
    )
    where, _ = placed([named], [paper(starts_in_s=-1)])
    assert where == {1: (0, 1)}
    where, why = placed([job(2, "ana", gpus=3, reservation="paper")], [paper(starts_in_s=-1)])
    assert where == {} and why[2].startswith("in reservation paper: waiting for 3 GPUs whole")


def test_the_window_waits_for_who_still_holds_its_gpu_and_says_so():
    named = job(1, "ana", reservation="paper")
    where, why = placed([named], [paper(starts_in_s=-1)], [Claim(7, 0, None), Claim(6, 1, None)])
    assert where == {}
    assert why[1] == (
        "in reservation paper: waiting for 1 GPU whole; GPU 0 is held whole by job 7; "
        "GPU 1 is held whole by job 6"
    )


def test_a_non_member_naming_it_waits_and_is_told_it_is_not_a_user():
    where, why = placed([job(1, "cy", reservation="paper")], [paper(starts_in_s=-1)])
    assert where == {} and why[1].startswith("cy is not a user of reservation paper")


def test_a_job_naming_a_reservation_that_is_over_is_an_ordinary_job():
    where, _ = placed([job(1, "ana", reservation="paper")], [])
    assert where == {1: (0,)}


def test_a_kept_off_job_behind_the_head_says_the_reservation_not_the_head():
    busy = [Claim(9, 3, None)]
    head = job(1, "ana", gpus=4)  # a member, waiting for GPU 3
    outsider = job(2, "cy", gpus=2)  # GPU 2 alone is not enough for it
    where, why = placed([head, outsider], [paper(starts_in_s=-1)], busy)
    assert where == {}
    assert why[1].startswith("in reservation") is False and "GPU 3 is held whole" in why[1]
    assert why[2].startswith("GPUs 0-1 are reserved for paper (ana, bo)")


def test_a_job_kept_off_by_a_reservation_alone_holds_no_one_back():
    busy = [Claim(9, 3, None)]
    kept_off = job(1, "cy", gpus=2)  # 0-1 booked (and idle), 3 held with no end
    where, why = placed([kept_off, job(2, "dee")], [paper(starts_in_s=-1)], busy)
    assert where == {2: (2,)}
    assert why[1].startswith("GPUs 0-1 are reserved for paper")


@settings(max_examples=150, deadline=None)
@given(
    owners=st.lists(st.sampled_from(["ana", "bo", "cy", "dee"]), min_size=1, max_size=8),
    limits=st.lists(st.sampled_from([None, 600.0, 2 * HOUR, 5 * HOUR]), min_size=8, max_size=8),
    starts_in=st.sampled_from([-HOUR, 0.0, 30 * 60, 3 * HOUR]),
    named=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_no_one_else_ever_holds_a_booked_gpu_into_its_window(owners, limits, starts_in, named):
    booking = paper(starts_in_s=starts_in)
    queue = [
        job(i, o, time_limit_s=limits[i], reservation="paper" if named[i] else None)
        for i, o in enumerate(owners)
    ]
    where, why = placed(queue, [booking])
    for request in queue:
        gpus = where.get(request.job_id)
        if gpus is None:
            assert why[request.job_id]
            continue
        member = request.owner in booking.users
        if request.reservation == "paper" and member:
            assert booking.is_open(NOW) and set(gpus) <= booking.gpus
        if not member and set(gpus) & booking.gpus:
            assert request.time_limit_s is not None
            assert NOW + request.time_limit_s <= booking.starts_at


def test_the_words():
    assert gpu_list([7]) == "GPU 7"
    assert gpu_list([3, 1, 2, 0]) == "GPUs 0-3"
    assert gpu_list([0, 2, 5]) == "GPUs 0, 2, 5"
    assert as_span(2 * HOUR + 10 * 60 + 59) == "2h10m"
    assert as_span(26 * HOUR) == "1d2h"
    day = datetime(2026, 12, 4, tzinfo=UTC).timestamp()
    assert window_text(day + 9 * HOUR, day + 17 * HOUR, day) == "09:00-17:00 UTC"
    assert window_text(day + 9 * HOUR, day + 17 * HOUR, day - 86400) == "Fri 12-04 09:00-17:00 UTC"
    assert (
        window_text(day + 9 * HOUR, day + 33 * HOUR, day) == "Fri 12-04 09:00 - Sat 12-05 09:00 UTC"
    )
    many = label("x", ["a", "b", "c", "d", "e", "f"], "ml", day, day + HOUR, day)
    assert many == "x (a, b, c, d, 2 more, group ml) 00:00-01:00 UTC"
