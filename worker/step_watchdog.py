"""A hung training step ends the job instead of holding its GPUs forever.

MirroredStrategy's all-reduce has no timeout of its own: a replica that never arrives
(a wedged GPU, a stuck collective) blocks every other one for good. A thread watches the
time since the last sign of progress (a batch, a validation batch, an epoch boundary)
and, past `timeout_s`, says so in the events and ends the process with
`ExitCode.step_timeout` (reason `idle`). It is armed by the first finished batch, so the
first step's tracing and compiling never count. Imported after the devices are set up.
"""

import os
import threading
import time
from typing import Any

import keras

from gpuq.contract.events import Event, EventWriter
from gpuq.contract.exits import ExitCode


class StepWatchdog(keras.callbacks.Callback):
    def __init__(self, timeout_s: float, events: EventWriter) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self._events = events
        self._last: float | None = None  #: None until the first batch has finished
        self._done = threading.Event()

    def on_train_begin(self, logs: Any = None) -> None:
        threading.Thread(target=self._watch, name="gpuq-step-watchdog", daemon=True).start()

    def on_train_end(self, logs: Any = None) -> None:
        self._done.set()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._last = time.monotonic()

    def on_test_batch_end(self, batch: int, logs: Any = None) -> None:
        self._last = time.monotonic()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._last is not None:
            self._last = time.monotonic()

    def _watch(self) -> None:
        while not self._done.wait(min(5.0, self.timeout_s / 4)):
            last = self._last
            if last is not None and time.monotonic() - last > self.timeout_s:
                message = (
                    f"a training step did not finish in {self.timeout_s:g} s (a hung "
                    "all-reduce?); the job ended rather than hold its GPUs"
                )
                print(f"gpuq: {message}", flush=True)
                self._events.emit(Event.failed, message=message)
                os._exit(ExitCode.step_timeout)
