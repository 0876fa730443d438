"""The builtin jobs' checkpoints are written beside training: a slow write does not hold
the epochs after it, yet saves its own epoch's values; training's end waits for the last
write; a failed write is raised by `fit`; a kill at any moment leaves a checkpoint that
loads; and the files are those `save_weights` writes. Real Keras training in a child
process, slowed by a FIFO where the checkpoint's metadata is written: the write blocks
until the test reads it."""

import json
import os
import queue
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

#: real Keras training in a subprocess: `make test` runs it, `make check` does not
pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import keras, numpy as np
    from worker.checkpoints import Checkpoints

    args = json.loads(sys.argv[1])
    directory, out = Path(args["dir"]), args.get("out")
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).standard_normal((args["samples"], 8)).astype("float32")
    optimizer = keras.optimizers.Adam(1e-3)
    if args.get("loss_scale"):  # stores values Checkpoints cannot trace to variables
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(args["hidden"]), keras.layers.Dense(1)]
    )
    model.compile(optimizer, "mse")

    class Watch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch + 1

        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                print("began", self.epoch, flush=True)

        def on_epoch_end(self, epoch, logs=None):
            if out:
                np.savez(f"{out}/epoch-{epoch + 1}.npz", *model.get_weights())
                model.save_weights(f"{out}/epoch-{epoch + 1}.weights.h5")
            print("trained", epoch + 1, flush=True)

    backup = Checkpoints(directory, cut_short=lambda: False)
    error = None
    try:
        model.fit(
            x, x[:, :1], batch_size=args["batch"], epochs=args["epochs"], verbose=0,
            callbacks=[Watch(), backup],
        )
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    metadata = directory / "training_metadata.json"
    print(json.dumps({"error": error, "on_disk": metadata.exists()}), flush=True)
    """
)


class Child:
    """The training script in a child process, its lines read as they come."""

    def __init__(self, directory: Path, out: Path | None = None, **options: Any) -> None:
        args = {"dir": str(directory), "out": out and str(out), "samples": 64, "batch": 16}
        args |= {"hidden": 64, "epochs": 2} | options
        self.process = subprocess.Popen(
            [sys.executable, "-c", TRAIN, json.dumps(args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
            cwd=Path(__file__).parents[2],
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put("")  # the end

    def expect(self, wanted: str, timeout_s: float = 120) -> str:
        """Waits for a line starting with `wanted`; the line, or "" if it never came."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line.startswith(wanted) or not line:
                return line
        return ""

    def all_lines(self) -> list[str]:
        """Every line it writes, once it has exited."""
        assert self.process.wait(timeout=180) == 0
        return list(iter(self.lines.get, ""))

    def report(self) -> dict[str, Any]:
        """What the script said after `fit` returned."""
        line = self.expect("{")
        assert self.process.wait(timeout=60) == 0
        return json.loads(line)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


def blocking_fifo(directory: Path, name: str = "training_metadata.json.partial") -> Path:
    """A FIFO where the next checkpoint's metadata goes (or `name`): its write waits for
    `drain`."""
    directory.mkdir(parents=True, exist_ok=True)
    fifo = directory / name
    os.mkfifo(fifo)
    return fifo


def drain(fifo: Path, timeout_s: float = 60) -> dict[str, int]:
    """Reads what the blocked write writes into `fifo`, which lets it go on."""
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert read, "no checkpoint was written into the FIFO"
    return json.loads(read[0])


def stored_weights(path: Path) -> list[np.ndarray]:
    """The layers' weights in a `.weights.h5` file, in `model.get_weights()` order."""
    with h5py.File(path) as f:
        layers = sorted(f["layers"], key=lambda name: int(name.partition("_")[2] or -1))
        return [np.array(f["layers"][n]["vars"][str(i)]) for n in layers for i in range(2)]


def epoch_weights(out: Path, epoch: int) -> list[np.ndarray]:
    with np.load(out / f"epoch-{epoch}.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_training_goes_on_while_a_slow_write_runs_and_the_write_keeps_its_epochs_values(
    tmp_path,
):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    out.mkdir()
    fifo = blocking_fifo(checkpoints)
    child = Child(checkpoints, out, epochs=2)
    try:
        assert child.expect("trained 1") == "trained 1"
        # Epoch 1's write is blocked; written on the training thread, it would hold epoch 2.
        assert child.expect("began 2", timeout_s=30) == "began 2", "a write held training"
        assert drain(fifo) == {"epoch": 1, "batch": 0}
        assert child.report() == {"error": None, "on_disk": True}
    finally:
        child.stop()
    # Epoch 1's weights were written after epoch 2 had changed the model: still epoch 1's.
    assert not same(epoch_weights(out, 1), epoch_weights(out, 2))
    assert same(stored_weights(checkpoints / "latest.weights.h5.bkp"), epoch_weights(out, 1))
    assert same(stored_weights(checkpoints / "latest.weights.h5"), epoch_weights(out, 2))
    assert json.loads((checkpoints / "training_metadata.json").read_text())["epoch"] == 2


def test_training_ends_once_the_last_epochs_checkpoint_is_on_disk(tmp_path):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    out.mkdir()
    fifo = blocking_fifo(checkpoints)
    child = Child(checkpoints, out, epochs=1)
    try:
        assert child.expect("trained 1") == "trained 1"
        time.sleep(1)  # `fit` would return meanwhile if it did not wait for the write
        assert drain(fifo) == {"epoch": 1, "batch": 0}
        assert child.report() == {"error": None, "on_disk": True}
    finally:
        child.stop()
    assert same(stored_weights(checkpoints / "latest.weights.h5"), epoch_weights(out, 1))


@pytest.mark.parametrize("epochs", [1, 3], ids=["at-training's-end", "at-the-next-epoch"])
def test_a_write_that_fails_fails_fit(tmp_path, epochs):
    (tmp_path / "partial.weights.h5").mkdir()  # where the weights are written: not a file
    child = Child(tmp_path, epochs=epochs)
    try:
        lines = child.all_lines()
    finally:
        child.stop()
    assert any(line.startswith("gpuq: could not write epoch 1's checkpoint") for line in lines)
    assert "partial.weights.h5" in json.loads(lines[-1])["error"]
    # Epoch 1's write failed beside epoch 2, which ends by raising it.
    assert [line for line in lines if line.startswith("trained")] == [
        f"trained {e}" for e in range(1, min(epochs, 2) + 1)
    ]


@pytest.mark.parametrize("loss_scale", [False, True], ids=["traced", "walked-each-save"])
def test_a_checkpoint_holds_what_save_weights_writes(tmp_path, loss_scale):
    checkpoints, out = tmp_path / "checkpoints", tmp_path / "out"
    out.mkdir()
    child = Child(checkpoints, out, epochs=2, loss_scale=loss_scale)
    try:
        assert child.report() == {"error": None, "on_disk": True}
    finally:
        child.stop()
    for ours, keras_own in (("latest.weights.h5", 2), ("latest.weights.h5.bkp", 1)):
        assert h5_contents(checkpoints / ours) == h5_contents(out / f"epoch-{keras_own}.weights.h5")


def h5_contents(path: Path) -> dict[str, Any]:
    """Every group's and dataset's attributes and every dataset's dtype and values."""
    contents: dict[str, Any] = {}

    def note(name: str, item: Any) -> None:
        data = (
            (item.dtype.str, np.array(item).tobytes()) if isinstance(item, h5py.Dataset) else None
        )
        contents[name] = (dict(item.attrs), data)

    with h5py.File(path) as f:
        f.visititems(note)
    return contents


def saved_epoch(directory: Path) -> int:
    metadata = directory / "training_metadata.json"
    return json.loads(metadata.read_text())["epoch"] if metadata.exists() else 0


def test_a_kill_at_any_moment_leaves_a_checkpoint_that_loads(tmp_path):
    # One step per epoch and 14 MB of weights and optimizer state: a write is in flight
    # most of the time (7 kills in 10 land in one here), so the kills land in every part.
    model, draw = {"samples": 32, "batch": 32, "hidden": 131_072}, random.Random(52)
    saved, in_a_write = 0, 0
    for _ in range(6):
        child = Child(tmp_path, epochs=100_000, **model)
        try:
            # It starts from what the last kill left: the latest checkpoint, never older.
            assert child.expect("began") == f"began {saved + 1}"
            time.sleep(draw.uniform(0, 1.5))
        finally:
            child.stop()
        in_a_write += bool(list(tmp_path.glob("*.partial")))
        saved = saved_epoch(tmp_path)
        if saved:
            assert len(stored_weights(tmp_path / "latest.weights.h5")) == 4
    assert in_a_write, "no kill landed in a write"
    child = Child(tmp_path, epochs=saved + 3, **model)
    assert child.expect("began") == f"began {saved + 1}"
    assert child.report() == {"error": None, "on_disk": True}
    assert saved_epoch(tmp_path) == saved + 3
    assert not list(tmp_path.glob("*partial*"))


def test_a_backup_is_a_file_of_its_own_even_in_the_middle_of_a_write(tmp_path):
    """Kept as a copy, not a hard link: a kill between the backup and the rename, and then a
    latest file found unreadable, still leaves the backup to fall back to."""
    checkpoints = tmp_path / "checkpoints"
    # Epoch 2's write stops where it backs up the metadata: the weights' backup is made.
    fifo = blocking_fifo(checkpoints, "training_metadata.json.bkp.partial")
    child = Child(checkpoints, epochs=2)
    try:
        backup = checkpoints / "latest.weights.h5.bkp"
        deadline = time.monotonic() + 60
        while not backup.exists():
            assert time.monotonic() < deadline, "epoch 2's write never backed up the weights"
            time.sleep(0.05)
        latest = checkpoints / "latest.weights.h5"
        assert os.stat(latest).st_ino != os.stat(backup).st_ino
        assert os.stat(backup).st_nlink == 1
        assert drain(fifo) == {"epoch": 1, "batch": 0}
        assert child.report() == {"error": None, "on_disk": True}
    finally:
        child.stop()
