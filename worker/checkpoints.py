"""The builtin jobs' checkpoints: Keras's `BackupAndRestore`, made safe against a kill at
any moment and against a stop in the middle of an epoch.

- Each file is written beside its place and renamed over it, so a kill leaves the old
  checkpoint or the new one, never half a file; the one before is kept (`.bkp`), and a
  checkpoint that still cannot be read (a disk that lied, a truncated copy) falls back to it.
- An epoch cut short by a stop (SIGTERM: a cancel, a preemption) is not saved as done: the
  next attempt trains it again from the epoch before, so a stop loses at most that epoch.

Import it only once TensorFlow's devices are configured (it imports Keras).
"""

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras


class Checkpoints(keras.callbacks.BackupAndRestore):
    def __init__(self, directory: Path, *, cut_short: Callable[[], bool]) -> None:
        super().__init__(
            str(directory), save_freq="epoch", delete_checkpoint=False, double_checkpoint=True
        )
        self.directory = directory
        #: whether the epoch that just ended was stopped before its last batch
        self.cut_short = cut_short

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        try:
            if self._metadata.exists() and not self._weights.exists():
                raise OSError("the checkpoint's weights are missing")
            self._load_model()
        except (OSError, ValueError, KeyError):  # unreadable weights, metadata or layout
            self._fall_back()

    @property
    def _weights(self) -> Path:
        return self.directory / "latest.weights.h5"

    @property
    def _metadata(self) -> Path:
        return self.directory / "training_metadata.json"

    def _fall_back(self) -> None:
        """Restores the checkpoint before the latest; trains from the start if none."""
        for path in (self._weights, self._metadata):
            backup = path.with_name(path.name + ".bkp")
            if backup.exists():
                os.replace(backup, path)
            else:
                path.unlink(missing_ok=True)
        self._load_model()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.cut_short():
            return
        super().on_epoch_end(epoch, logs)

    def _save_model(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        for path in (self._weights, self._metadata):
            if path.exists():
                _replace_with(path.with_name(path.name + ".bkp"), path.read_bytes())
        # The metadata says which epoch the weights are of: written last, so a kill between
        # the two leaves an epoch trained again, never one skipped.
        partial = self.directory / "partial.weights.h5"
        self.model.save_weights(str(partial), overwrite=True)
        os.replace(partial, self._weights)
        done = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
        _replace_with(self._metadata, json.dumps(done).encode())


def _replace_with(path: Path, content: bytes) -> None:
    """Writes `path` whole or not at all (beside it, then renamed over it)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(content)
    os.replace(partial, path)
