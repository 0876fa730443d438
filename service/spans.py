"""Spans of time as people write them, for the CLI's options and the API's query
parameters alike: `2h30m`, `90m`, `45s`, `1d12h`."""

import re

_UNITS_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_SPAN = re.compile(r"^(?:\d+(?:\.\d+)?[dhms])+$")
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


def span_seconds(word: str) -> float | None:
    """The seconds `word` (lower case, no spaces) spans: `1d12h` -> 129600.0; None if it
    is not a span."""
    if not _SPAN.match(word):
        return None
    return sum(float(n) * _UNITS_S[u] for n, u in _SPAN_PART.findall(word))
