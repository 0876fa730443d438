"""`gpuq reserve` and `gpuq reservations`, in-process against the API, and the moments
people type for `--from` and `--until`."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from service.cli.units import parse_moment


def test_book_list_change_and_delete(gpuq):
    code, out, err = gpuq(
        "reserve", "--gpus", "2", "--from", "+1h", "--for", "8h", "--users", "ana,bo",
        "--name", "paper",
    )  # fmt: skip
    assert code == 0, err
    assert out.startswith("reservation 1 paper: GPUs 0-1 for ana, bo, ")
    assert out.rstrip().endswith("(16 GPU-hours), upcoming")

    code, out, _ = gpuq("reservations")
    header, row = out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "GPUS", "USERS"]
    assert row.split()[:3] == ["1", "paper", "GPUs"] and "ana, bo" in row and "upcoming" in row

    code, out, _ = gpuq("reserve", "--change", "paper", "--for", "2h", "--json")
    changed = json.loads(out)
    starts, ends = (datetime.fromisoformat(changed[k]) for k in ("starts_at", "ends_at"))
    assert code == 0 and ends - starts == timedelta(hours=2)

    code, out, _ = gpuq("reserve", "--delete", "1")
    assert code == 0 and "released: deleted by anonymous" in out
    assert gpuq("reservations")[1].strip() == "no reservations open or to come (--all: every one)"
    assert "released" in gpuq("reservations", "--all")[1]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--gpus", "1", "--from", "someday", "--for", "1h", "--name", "x"], "--from"),
        (["--gpus", "1", "--for", "soon", "--name", "x"], "--for"),
        (["--gpus", "1", "--for", "1h"], "--name"),
        (["--for", "1h", "--name", "x"], "--gpus"),
        (["--gpus", "1", "--name", "x"], "--for"),
        (["--gpu-ids", "a,b", "--for", "1h", "--name", "x"], "--gpu-ids"),
        (["--gpus", "1", "--for", "1h", "--until", "18:00", "--name", "x"], "--until"),
    ],
)
def test_a_bad_option_exits_2_naming_it(gpuq, args, option):
    code, _, err = gpuq("reserve", *args)
    assert code == 2 and option in err


def test_a_refusal_is_the_servers_words(gpuq):
    assert gpuq("reserve", "--gpus", "2", "--for", "1h", "--name", "a")[0] == 0
    code, _, err = gpuq("reserve", "--gpus", "1", "--for", "1h", "--name", "b")
    assert code == 1 and "GPUs 0-1 are reserved for a (anonymous)" in err


#: a Wednesday, 10:30 in this machine's zone (where a moment without one is read)
NOW = datetime(2026, 12, 2, 10, 30).astimezone()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("+2h", NOW + timedelta(hours=2)),
        ("09:00", NOW.replace(hour=9, minute=0) + timedelta(days=1)),
        ("today 18:00", NOW.replace(hour=18, minute=0)),
        ("tomorrow 14:00", NOW.replace(hour=14, minute=0) + timedelta(days=1)),
        ("fri 09:00", NOW.replace(day=4, hour=9, minute=0)),
        ("Friday 09:00", NOW.replace(day=4, hour=9, minute=0)),
        ("wed 11:00", NOW.replace(hour=11, minute=0)),  # later today
        ("wed 09:00", NOW.replace(day=9, hour=9, minute=0)),  # passed: next week's
        ("2026-12-04T09:00Z", datetime(2026, 12, 4, 9, tzinfo=UTC)),
    ],
)
def test_moments_people_type(text, expected):
    assert parse_moment(text, NOW) == expected


@pytest.mark.parametrize("text", ["someday", "fri", "fri 25:00", "+soon", "blursday 09:00"])
def test_what_is_not_a_moment_says_what_is(text):
    with pytest.raises(ValueError, match="is not a time"):
        parse_moment(text, NOW)
