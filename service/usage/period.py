"""What a usage report's `since` and `until` may say: an ISO 8601 time, or a span back
from now (`7d`, `24h`, `30m`, `1d12h`)."""

from datetime import UTC, datetime, timedelta

from service.errors import Invalid
from service.spans import span_seconds
from service.usage.report import Period

#: The period when `since` is not given: the last week.
DEFAULT_SPAN = timedelta(days=7)
#: The most days a report cut by day lists.
MAX_DAYS = 1000


def moment(text: str, now: datetime) -> datetime:
    """`7d`, `24h`, `30m`, `1d12h` (that long before `now`), `now`, or an ISO 8601 time
    (`2026-11-25`, `2026-11-25T06:00Z`, `...+01:00`; without a zone, UTC) -> an aware UTC
    time; `ValueError` with words fit for the user otherwise."""
    word = text.strip().lower()
    try:
        if word == "now":
            return now
        span = span_seconds(word)
        if span is not None:
            return now - timedelta(seconds=span)
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{text!r} is out of range") from None
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: write a span back from now (7d, 24h, 30m, 1d12h), now, "
            "or an ISO 8601 time (2026-11-25, 2026-11-25T06:00Z; without a zone, UTC)"
        ) from None


def period(since: str | None, until: str | None, now: datetime, *, by: str = "owner") -> Period:
    """The period `since`..`until` (default: the week up to now), its end no later than
    `now`; `Invalid` naming the query parameter when either cannot be read, or when it is
    empty."""
    end = min(_read("until", until, now), now) if until is not None else now
    start = _read("since", since, now) if since is not None else end - DEFAULT_SPAN
    if start >= end:
        where = "now" if until is None or end == now else until
        raise Invalid(("query", "since"), f"since ({start.isoformat()}) is not before {where}")
    if by == "day" and (end - start).days >= MAX_DAYS:
        raise Invalid(("query", "since"), f"by=day lists at most {MAX_DAYS} days; ask for fewer")
    return Period(start, end)


def _read(name: str, text: str, now: datetime) -> datetime:
    try:
        return moment(text, now)
    except ValueError as exc:
        raise Invalid(("query", name), str(exc)) from None
