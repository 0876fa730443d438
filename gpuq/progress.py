"""`GpuqProgress`: a Keras callback that reports epochs, sampled steps and metrics to gpuq.

Builtin jobs use it; a user's own script can too:

    from gpuq import GpuqProgress
    model.fit(x, y, epochs=5, batch_size=256, callbacks=[GpuqProgress(batch_size=256)])

Outside gpuq (no `GPUQ_EVENTS` in the environment) it does nothing.
"""

import os
import time
from pathlib import Path
from typing import Any

import keras

from gpuq.contract.events import Event, EventWriter, finite


class GpuqProgress(keras.callbacks.Callback):
    def __init__(
        self,
        events_path: Path | str | None = None,
        *,
        batch_size: int | None = None,
        samples: int | None = None,
        step_interval_s: float = 1.0,
        echo: bool = False,
    ) -> None:
        super().__init__()
        path = events_path or os.environ.get("GPUQ_EVENTS")
        self.writer = EventWriter(path) if path else None
        self.batch_size = batch_size
        self.samples = samples
        self.step_interval_s = step_interval_s
        #: also print a line per epoch to stdout (the job's log)
        self.echo = echo
        #: set from a SIGTERM handler; training stops after the current batch
        self.stop_requested = False
        self.stopped_early = False
        #: the stop came before the epoch's last batch: that epoch is not reported as done
        self.epoch_cut_short = False
        self._last_emit = 0.0

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.epochs = int(self.params.get("epochs") or 1)
        self.steps = int(self.params.get("steps") or 0) or None
        self._train_t0 = time.monotonic()
        self._first_step = True
        self._resumed_from: int | None = None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._first_step and epoch > 0 and self._resumed_from is None:
            # A checkpoint (BackupAndRestore) made Keras start past epoch 1.
            self._resumed_from = epoch
            if self.writer is not None:
                self.writer.emit(Event.resumed, epoch=epoch + 1)
            if self.echo:
                print(f"gpuq: resumed from the checkpoint of epoch {epoch}", flush=True)
        self.epoch = epoch + 1
        self._epoch_t0 = time.monotonic()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        now = time.monotonic()
        step = batch + 1
        if self.stop_requested and not self.stopped_early:
            self.model.stop_training = True
            self.stopped_early = True
            self.epoch_cut_short = self.steps is None or step < self.steps
        if self._first_step or now - self._last_emit >= self.step_interval_s:
            self._first_step = False
            self._last_emit = now
            self._emit(Event.step, step, now, logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.epoch_cut_short:
            if self.echo:
                print(
                    f"gpuq: epoch {self.epoch} was cut short by the stop: not counted as done",
                    flush=True,
                )
            return
        now = time.monotonic()
        self._emit(Event.epoch, self.steps, now, logs)
        if self.echo:
            values = " ".join(
                f"{k}={v:.4g}" if v is not None else f"{k}=nan"
                for k, v in finite(logs or {}).items()
            )
            rate = self._progress(self.steps, now)["samples_per_s"]
            took = f"{now - self._epoch_t0:.1f}s" + (f", {rate:g} samples/s" if rate else "")
            print(f"gpuq: epoch {self.epoch}/{self.epochs} ({took}) {values}", flush=True)

    def _emit(
        self, event: Event, step: int | None, now: float, logs: dict[str, Any] | None
    ) -> None:
        if self.writer is None:
            return
        progress = self._progress(step, now)
        fields = {"epoch": self.epoch, "step": step, "metrics": finite(logs or {})}
        self.writer.emit(event, progress=progress, **fields)

    def _progress(self, step: int | None, now: float) -> dict[str, Any]:
        done = None
        if self.steps and step:
            done = ((self.epoch - 1) * self.steps + step) / (self.epochs * self.steps)
        elapsed = now - self._train_t0
        # Only this attempt's share of the work took `elapsed`: epochs restored from a
        # checkpoint came for free.
        before = (self._resumed_from or 0) / self.epochs
        eta = elapsed * (1 - done) / (done - before) if done and done > before else None
        rate = None
        epoch_elapsed = now - self._epoch_t0
        if self.batch_size and step and epoch_elapsed > 0:
            seen = step * self.batch_size
            if self.samples is not None:
                seen = min(seen, self.samples)
            rate = round(seen / epoch_elapsed, 1)
        return {
            "epoch": self.epoch,
            "epochs": self.epochs,
            "step": step,
            "steps": self.steps,
            "fraction": None if done is None else round(done, 4),
            "samples_per_s": rate,
            "eta_s": None if eta is None else round(eta, 1),
        }
