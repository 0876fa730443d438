"""The builtin jobs' checkpoints survive a kill at any moment (a half-written metadata file,
weights missing) by falling back to the one before, and an epoch cut short by a stop is
not saved as done: real Keras training in a child process, the files cut as a kill would."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: real Keras training in a subprocess: `make test` runs it, `make check` does not
pytestmark = pytest.mark.e2e

TRAIN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import keras, numpy as np
    from gpuq.progress import GpuqProgress
    from worker.checkpoints import Checkpoints

    directory, epochs, stop_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")  # 4 batches of 16
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    progress = GpuqProgress()
    ran, batches = [], []

    class Watch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            ran.append(epoch + 1)

        def on_train_batch_begin(self, batch, logs=None):
            batches.append(batch)
            if len(batches) == stop_at:  # SIGTERM arrives during this batch
                progress.stop_requested = True

    backup = Checkpoints(directory, cut_short=lambda: progress.epoch_cut_short)
    model.fit(x, y, epochs=epochs, batch_size=16, verbose=0, callbacks=[Watch(), progress, backup])
    print(json.dumps(ran))
    """
)


def train(directory: Path, epochs: int, stop_at: int = 0) -> list[int]:
    """Trains up to `epochs` from what `directory` holds; the epochs this run trained."""
    done = subprocess.run(
        [sys.executable, "-c", TRAIN, str(directory), str(epochs), str(stop_at)],
        capture_output=True,
        text=True,
        timeout=180,
        env={"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def saved_epoch(directory: Path) -> int:
    return json.loads((directory / "training_metadata.json").read_text())["epoch"]


def test_a_checkpoint_a_kill_left_unreadable_falls_back_to_the_one_before(tmp_path):
    assert train(tmp_path, 3) == [1, 2, 3]
    assert saved_epoch(tmp_path) == 3
    metadata = tmp_path / "training_metadata.json"
    metadata.write_text(metadata.read_text()[:5])  # cut short while it was written
    assert train(tmp_path, 4) == [3, 4]  # epoch 2's checkpoint: epoch 3 is trained again
    assert saved_epoch(tmp_path) == 4

    (tmp_path / "latest.weights.h5").unlink()  # the weights gone, the metadata still there
    assert train(tmp_path, 5) == [4, 5]
    assert not list(tmp_path.glob("*.partial"))


def test_an_epoch_cut_short_by_a_stop_is_trained_again_not_skipped(tmp_path):
    # The stop comes in the 2nd of epoch 3's 4 batches: epochs 1 and 2 are saved, 3 is not.
    assert train(tmp_path, 5, stop_at=10) == [1, 2, 3]
    assert saved_epoch(tmp_path) == 2
    assert train(tmp_path, 5) == [3, 4, 5]
    # A stop in an epoch's last batch leaves that epoch done.
    other = tmp_path / "last-batch"
    assert train(other, 5, stop_at=8) == [1, 2]
    assert saved_epoch(other) == 2
