"""What a builtin job's checkpoint costs the training thread at each epoch's end, here (and
in another checkout of gpuq, `--before`, e.g. a `git worktree` of an older commit, side by
side in one run): `bench.training`'s model, trained for `--epochs` epochs under
MirroredStrategy with gpuq's `Checkpoints` callback, the time `fit` spends in its epoch-end
and train-end hooks measured around them. Usage:
    python -m bench.checkpoint_cost [--before /tmp/before] [--epochs 12] [--samples 20000]
"""

import argparse
import json
import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

from bench.common import PYTHON, ROOT, table

CHILD = """
import json, sys, tempfile, time
from pathlib import Path
import numpy as np, tensorflow as tf
replicas, samples, epochs = (int(a) for a in sys.argv[1:4])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
)
import keras
from worker.checkpoints import Checkpoints
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
rng = np.random.default_rng(0)
x = rng.standard_normal((samples, 600), dtype=np.float32)
y = (x @ rng.standard_normal((600, 1), dtype=np.float32) / np.sqrt(600)).astype("float32")
with strategy.scope():
    hidden = [keras.layers.Dense(u, activation="relu") for u in (512, 128, 128)]
    layers = [keras.Input(shape=(600,)), *hidden]
    model = keras.Sequential([*layers, keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
spent, ends = [], []
def timed(hook):
    def run(*args, **kwargs):
        began = time.perf_counter()
        hook(*args, **kwargs)
        spent.append(time.perf_counter() - began)
    return run
class Clock(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        ends.append(time.perf_counter())
with tempfile.TemporaryDirectory() as scratch:
    backup = Checkpoints(Path(scratch), cut_short=lambda: False)
    backup.on_epoch_end = timed(backup.on_epoch_end)
    backup.on_train_end = timed(backup.on_train_end)
    model.fit(x, y, epochs=epochs, batch_size=2000, callbacks=[Clock(), backup], verbose=0)
    size = (Path(scratch) / "latest.weights.h5").stat().st_size
print(json.dumps({"epoch_ends_s": spent[:-1], "train_end_s": spent[-1],
                  "epochs_s": [b - a for a, b in zip(ends, ends[1:])], "bytes": size}))
"""


def measure(tree: Path, replicas: int, samples: int, epochs: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "CUDA_VISIBLE_DEVICES": ""}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}
    argv = [PYTHON, "-c", CHILD, str(replicas), str(samples), str(epochs)]
    out = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout, measured beside this")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--samples", type=int, default=20_000)
    args = parser.parse_args()
    rows = []
    for replicas in (1, 2):
        trees = [("now", ROOT)] if args.before is None else [("before", args.before), ("now", ROOT)]
        for name, tree in trees:
            got = measure(tree.resolve(), replicas, args.samples, args.epochs)
            # The first epoch's end holds the first write's set-up (tracing the layout).
            ends = got["epoch_ends_s"][1:]
            epoch = statistics.median(got["epochs_s"][1:])
            hook = statistics.median(ends)
            rows.append(
                [
                    str(replicas),
                    name,
                    f"{hook * 1000:.1f}",
                    f"{max(ends) * 1000:.1f}",
                    f"{got['train_end_s'] * 1000:.1f}",
                    f"{epoch:.3f}",
                    f"{hook / epoch:.1%}",
                    f"{got['bytes'] / 1e6:.1f}",
                ]
            )
    print(f"Checkpoint on the training thread, {args.samples} samples, {args.epochs} epochs")
    head = ["replicas", "gpuq", "epoch end (ms, median)", "max (ms)", "train end (ms)"]
    head += ["epoch (s)", "of the epoch", "checkpoint (MB)"]
    print(table(head, rows))


if __name__ == "__main__":
    main()
