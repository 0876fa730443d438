"""The builtin jobs' checkpoints: Keras's `BackupAndRestore`, made safe against a kill at
any moment and against a stop in the middle of an epoch, and written beside training.

- Each file is written beside its place and renamed over it, so a kill leaves the old
  checkpoint or the new one, never half a file; the one before is kept (`.bkp`), and a
  checkpoint that still cannot be read (a disk that lied, a truncated copy) falls back to it.
- An epoch cut short by a stop (SIGTERM: a cancel, a preemption) is not saved as done: the
  next attempt trains it again from the epoch before, so a stop loses at most that epoch.
- At an epoch's end the training thread only copies the weights and the optimizer's state
  to host memory (about 6 ms for the bench's 4.7 MB, against 33-36 ms for the whole write);
  a thread writes them while the next epoch trains. One write at a time: an epoch that ends
  while the last one's write still runs waits for it, so every epoch is still saved and a
  single copy of the state is held. Training's end waits for the write too (a SIGTERM ends
  training, so a stop's last epoch is on disk before the process exits), and a write's
  error is raised on the training thread at the next epoch's end or at training's end.

Import it only once TensorFlow's devices are configured (it imports Keras).
"""

import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
from keras.src.saving import saving_lib

#: one call of `save_weights`'s `store.make(path, metadata)`, and what it stored there
Group = tuple[str, dict[str, Any] | None, list[tuple[str, Any]]]


class Checkpoints(keras.callbacks.BackupAndRestore):
    def __init__(self, directory: Path, *, cut_short: Callable[[], bool]) -> None:
        super().__init__(
            str(directory), save_freq="epoch", delete_checkpoint=False, double_checkpoint=True
        )
        self.directory = directory
        #: whether the epoch that just ended was stopped before its last batch
        self.cut_short = cut_short
        #: where `save_weights` finds each value (variables, read at each save); None if
        #: some value cannot be traced to a variable, and the model is walked at each save
        self._layout: list[Group] | None = None
        self._traced = False
        self._writing: _Writer | None = None

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
        self.wait()
        if self.cut_short():
            return
        super().on_epoch_end(epoch, logs)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.wait()

    def wait(self) -> None:
        """Returns once the write in flight (if any) is on disk; raises what it raised."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.join()
            if writing.error is not None:
                raise writing.error

    def _save_model(self) -> None:
        done = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
        self._writing = _Writer(self.directory, self._snapshot(), done)
        self._writing.start()

    def _snapshot(self) -> list[Group]:
        """What `save_weights` would write now, copied to host memory."""
        if not self._traced:
            self._layout, self._traced = _layout(self.model), True
        groups = self._layout if self._layout is not None else _stored(self.model)
        # Copied, not viewed: on the CPU `numpy()` may share the variable's buffer, which the
        # next epoch's steps update while the writer reads it.
        return [
            (path, meta, [(k, np.array(v, copy=True)) for k, v in vs]) for path, meta, vs in groups
        ]


class _Writer(threading.Thread):
    """Writes one checkpoint; keeps its error for the training thread. Not a daemon: a
    process that ends without waiting still finishes the write before it exits."""

    def __init__(self, directory: Path, groups: list[Group], done: dict[str, int]) -> None:
        super().__init__(name="checkpoint writer")
        self.directory, self.groups, self.done = directory, groups, done
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            _write(self.directory, self.groups, self.done)
        except BaseException as exc:
            # Said at once too: a process that never waits would not raise it.
            epoch = self.done["epoch"]
            print(f"gpuq: could not write epoch {epoch}'s checkpoint: {exc!r}", flush=True)
            self.error = exc


def _write(directory: Path, groups: list[Group], done: dict[str, int]) -> None:
    """Writes the checkpoint beside the latest, keeps the latest as `.bkp` and renames the
    new one into place: a kill at any moment leaves a checkpoint that loads."""
    directory.mkdir(parents=True, exist_ok=True)
    weights, metadata = directory / "latest.weights.h5", directory / "training_metadata.json"
    metadata_partial = _beside(metadata, json.dumps(done).encode())
    weights_partial = directory / "partial.weights.h5"
    store = saving_lib.H5IOStore(weights_partial, mode="w")
    try:
        for group, meta, items in groups:
            store.make(group, meta)
            for key, value in items:
                store[key] = value
    finally:
        store.close()
    for path in (weights, metadata):
        # A copy, not a hard link: a latest file later found unreadable (a disk that lied)
        # must not take its backup with it, whenever a kill stopped this write.
        content = _regular_file(path)
        if content is not None:
            backup = path.with_name(path.name + ".bkp")
            os.replace(_beside(backup, content), backup)
    # The metadata says which epoch the weights are of: renamed last, so a kill between
    # the two leaves an epoch trained again, never one skipped.
    os.replace(weights_partial, weights)
    os.replace(metadata_partial, metadata)


def _regular_file(path: Path) -> bytes | None:
    """What `path` holds if it is a regular file (not a link, a FIFO: what a job's own
    program may have left there); None if it is not, or is gone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def _beside(path: Path, content: bytes) -> Path:
    """Writes `content` beside `path`, to be renamed over it; the file written."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(content)
    return partial


class _Recorder(saving_lib.H5IOStore):
    """Takes down what `save_weights` stores, in its order, instead of writing a file (an
    `H5IOStore` because Keras's walk over the model accepts no other kind of store)."""

    def __init__(self) -> None:
        self.mode = "w"
        self.groups: list[Group] = []

    def __bool__(self) -> bool:
        return True

    def make(self, path: str, metadata: dict[str, Any] | None = None) -> "_Recorder":
        self.groups.append((path, metadata, []))
        return self

    def __setitem__(self, key: str, value: Any) -> None:
        self.groups[-1][2].append((key, value))


def _stored(model: Any) -> list[Group]:
    """What `save_weights` stores for `model`: layers give their variables, an optimizer
    the values of its variables."""
    recorder = _Recorder()
    saving_lib._save_state(model, recorder, None, "", set())
    return recorder.groups


def _layout(model: Any) -> list[Group] | None:
    """`_stored` with each value traced to its variable, so a save only reads variables
    (walking the model takes 6 ms); None if some value comes from elsewhere."""
    optimizer = list(model.optimizer.variables) if model.optimizer is not None else []
    groups = _stored(model)
    for _, _, items in groups:
        if all(isinstance(value, keras.Variable) for _, value in items):
            continue
        if not _stored_by(optimizer, items):
            return None
        items[:] = [(key, optimizer[int(key)]) for key, _ in items]
    return groups


def _stored_by(optimizer: list[Any], items: list[tuple[str, Any]]) -> bool:
    """Whether `items` are what the optimizer stores: `variables[i].numpy()` under "i"."""
    return [key for key, _ in items] == [str(i) for i in range(len(optimizer))] and all(
        np.shape(value) == tuple(v.shape) and np.asarray(value).dtype == v.dtype
        for (_, value), v in zip(items, optimizer, strict=True)
    )
