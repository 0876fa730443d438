"""What people type for `gpuq run` and `gpuq shell`: memory sizes, durations and moments.

Each parser raises `ValueError` with words fit for `Invalid value for '--mem': ...`.
"""

import re
from datetime import UTC, datetime, time, timedelta

from service.spans import span_seconds

#: MiB per unit; `G` means GiB here, as GPU memory is counted (nvidia-smi, TensorFlow)
_SIZES = {"": 1, "m": 1, "mb": 1, "mib": 1, "g": 1024, "gb": 1024, "gib": 1024}
_SIZES |= {"t": 1024 * 1024, "tb": 1024 * 1024, "tib": 1024 * 1024}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)

_CLOCK = re.compile(r"^(?:(\d+):)?(\d{1,2}):(\d{2})$")


def mebibytes(text: str) -> int:
    """`8GiB`, `8G`, `8GB`, `8192M`, `8192` (MiB), `7.5G` -> MiB."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZES:
        raise ValueError(f"{text!r} is not a memory size: write 8GiB, 8G, 8192M or 8192 (MiB)")
    size = round(float(match.group(1)) * _SIZES[unit])
    if size < 1:
        raise ValueError(f"{text!r} is less than 1 MiB")
    return size


def seconds(text: str) -> float:
    """`2h30m`, `90m`, `45s`, `1d12h`, `1:30:00` (h:mm:ss), `30:00` (m:ss) -> seconds."""
    word = text.strip().lower()
    clock = _CLOCK.match(word)
    if clock:
        hours, minutes, secs = (int(g or 0) for g in clock.groups())
        total: float | None = hours * 3600 + minutes * 60 + secs
    else:
        total = span_seconds(word)
    if total is None:
        raise ValueError(
            f"{text!r} is not a duration: write 2h30m, 90m, 45s, 1d or 1:30:00 (a bare "
            "number has no unit)"
        )
    if total <= 0:
        raise ValueError(f"{text!r} is no time at all")
    return total


#: weekdays as people type them: `fri`, `friday`
_WEEKDAYS = {
    name: n
    for n, day in enumerate(
        ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
    )
    for name in (day, day[:3])
}
_DAY_AND_TIME = re.compile(r"^([a-z]+)\s+(\d{1,2}):(\d{2})$")
MOMENTS = (
    "write now, +2h, 18:00 (the next 18:00 here), today 18:00, tomorrow 09:00, fri 09:00 (the "
    "next Friday), or an ISO time such as 2026-11-25T06:00 or 2026-11-25T06:00Z"
)


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """`now`, `+2h` (from now), `18:00` (the next 18:00 here), `today 18:00`, `tomorrow
    09:00`, `fri 09:00` (the next Friday, today if that time is still ahead), or an ISO time
    (`2026-11-25T06:00`, `...Z`, `...+01:00`; without a zone, this machine's) -> an aware
    time."""
    now = (now or datetime.now(UTC)).astimezone()
    word = text.strip().lower()
    if word == "now":
        return now
    if word.startswith("+"):
        try:
            return now + timedelta(seconds=seconds(word[1:]))
        except ValueError:
            raise ValueError(f"{text!r} is not a time: {MOMENTS}") from None
    if re.fullmatch(r"\d{1,2}:\d{2}", word):
        at = _clock_today(word, now, text)
        return at if at > now else at + timedelta(days=1)
    day = _DAY_AND_TIME.match(word)
    if day is not None:
        at = _clock_today(f"{day.group(2)}:{day.group(3)}", now, text)
        name = day.group(1)
        if name == "today":
            return at
        if name == "tomorrow":
            return at + timedelta(days=1)
        if name in _WEEKDAYS:
            ahead = (_WEEKDAYS[name] - now.weekday()) % 7
            at += timedelta(days=ahead)
            return at if at > now else at + timedelta(days=7)
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time: {MOMENTS}") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=now.tzinfo)


def _clock_today(word: str, now: datetime, text: str) -> datetime:
    hour, minute = (int(p) for p in word.split(":"))
    if hour > 23 or minute > 59:
        raise ValueError(f"{text!r} is not a time of day")
    return datetime.combine(now.date(), time(hour, minute), now.tzinfo)
