"""What `since` and `until` may say: spans back from now, ISO times (UTC without a zone),
`now`; the rest is a 422 naming the parameter."""

from datetime import UTC, datetime, timedelta

import pytest

from service.errors import Invalid
from service.usage.period import moment, period

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("24h", NOW - timedelta(hours=24)),
        ("30m", NOW - timedelta(minutes=30)),
        ("1d12h", NOW - timedelta(hours=36)),
        ("1.5h", NOW - timedelta(minutes=90)),
        ("now", NOW),
        ("2026-11-20", datetime(2026, 11, 20, tzinfo=UTC)),
        ("2026-11-20T06:30", datetime(2026, 11, 20, 6, 30, tzinfo=UTC)),
        ("2026-11-20T06:30Z", datetime(2026, 11, 20, 6, 30, tzinfo=UTC)),
        ("2026-11-20T07:30+01:00", datetime(2026, 11, 20, 6, 30, tzinfo=UTC)),
    ],
)
def test_moments(text, expected):
    assert moment(text, NOW) == expected
    assert moment(text, NOW).tzinfo == UTC


@pytest.mark.parametrize("text", ["", "7", "7w", "yesterday", "2026-13-01", "d7", "-7d"])
def test_what_is_not_a_moment(text):
    with pytest.raises(ValueError, match="is not a time"):
        moment(text, NOW)


@pytest.mark.parametrize("text", ["99999999999d", "0001-01-01T00:00+01:00", "1" * 400 + "s"])
def test_out_of_range_is_a_value_error_too(text):
    with pytest.raises(ValueError, match="out of range"):
        moment(text, NOW)


def test_the_default_period_is_the_last_week_and_never_ends_after_now():
    assert period(None, None, NOW) == period("7d", "now", NOW)
    assert period(None, None, NOW).since == NOW - timedelta(days=7)
    assert period("1d", "2030-01-01", NOW).until == NOW
    assert period(None, "2026-11-20", NOW).since == datetime(2026, 11, 13, tzinfo=UTC)


@pytest.mark.parametrize(
    ("since", "until", "loc", "words"),
    [
        ("soon", None, "since", "is not a time"),
        (None, "later", "until", "is not a time"),
        ("1d", "2d", "since", "is not before 2d"),
        ("2030-01-01", None, "since", "is not before now"),
        ("now", None, "since", "is not before now"),
    ],
)
def test_an_unreadable_or_empty_period_names_the_parameter(since, until, loc, words):
    with pytest.raises(Invalid) as refused:
        period(since, until, NOW)
    assert refused.value.loc == ("query", loc)
    assert words in refused.value.message


def test_a_report_by_day_is_at_most_a_thousand_days():
    assert len(period("999d", None, NOW, by="day").days()) == 1000
    with pytest.raises(Invalid, match="at most 1000 days"):
        period("1000d", None, NOW, by="day")
    assert period("1000d", None, NOW, by="owner").since == NOW - timedelta(days=1000)
