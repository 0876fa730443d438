"""Appends JSON-line events to `events.jsonl`; the scheduler tails them. No TensorFlow."""

import json
import math
import os
import time
from pathlib import Path
from typing import Any


def finite(values: dict[str, Any]) -> dict[str, float | None]:
    """Metric values as plain floats, with NaN and infinities as None (JSON has neither)."""
    out: dict[str, float | None] = {}
    for key, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = number if math.isfinite(number) else None
    return out


class EventWriter:
    """One event per line, each written with a single append so lines never interleave."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "ts": round(time.time(), 3), **fields}
        os.write(self._fd, (json.dumps(record, allow_nan=False) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)
