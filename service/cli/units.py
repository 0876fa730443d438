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


def parse_moment(text: str, now: datetime | None = None) -> datetime:
    """`18:00` (the next 18:00 here), or an ISO time (`2026-11-25T06:00`, `...Z`,
    `...+01:00`; without a zone, this machine's) -> an aware time."""
    now = (now or datetime.now(UTC)).astimezone()
    word = text.strip()
    if re.fullmatch(r"\d{1,2}:\d{2}", word):
        hour, minute = (int(p) for p in word.split(":"))
        if hour > 23 or minute > 59:
            raise ValueError(f"{text!r} is not a time of day")
        at = datetime.combine(now.date(), time(hour, minute), now.tzinfo)
        return at if at > now else at + timedelta(days=1)
    try:
        at = datetime.fromisoformat(word.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: write 18:00 (the next 18:00 here) or an ISO time such "
            "as 2026-11-25T06:00 or 2026-11-25T06:00Z"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=now.tzinfo)
