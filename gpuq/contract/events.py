"""The events a job writes to `events.jsonl`, one JSON line each; the scheduler tails them.

Standard library only (the runner and the start-up hook use it too).
"""

import json
import math
import os
import time
from enum import StrEnum
from pathlib import Path
from typing import Any


class Event(StrEnum):
    started = "started"  #: TensorFlow is up: `num_replicas`, `devices`, `init_s`
    running = "running"  #: a program gpuq cannot see inside has started
    resumed = "resumed"  #: training picked up from a checkpoint at `epoch`
    step = "step"  #: a sampled step: `epoch`, `step`, `progress`, `metrics`
    epoch = "epoch"  #: an epoch ended: `epoch`, `progress`, `metrics`
    failed = "failed"  #: the training process explains its failing exit in `message`
    stopped = "stopped"  #: stopped early on SIGTERM, model saved; `message`
    finished = "finished"  #: trained and saved: `artifacts`
    #: a job on several nodes found them all: `nodes` (rank, node, address, port, gpus)
    nodes = "nodes"


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

    def emit(self, event: Event, **fields: Any) -> None:
        record = {"event": event.value, "ts": round(time.time(), 3), **fields}
        os.write(self._fd, (json.dumps(record, allow_nan=False) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)
