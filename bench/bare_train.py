"""The baseline for `bench.training`: a plain Keras script, no gpuq, printing its timings.

It trains what gpuq's builtin `mlp` job trains (synthetic regression, Dense layers, Adam,
MSE) under MirroredStrategy over `--replicas` logical CPU devices, as gpuq's simulated
GPUs do, and prints one JSON line: wall-clock times of its start, TensorFlow imported and
the first step, and each epoch's end. `--progress` adds gpuq's own progress callback
(writing to a scratch file) to measure what reporting costs. Usage:
    python -m bench.bare_train --replicas 2 --samples 40000 --epochs 4 --batch 2000
"""

import time

BEGAN = time.time()  # before any import worth timing

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

IMPORTED = time.time()

import keras  # noqa: E402

HIDDEN = (512, 128, 128)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--features", type=int, default=600)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2000, help="global batch size")
    parser.add_argument("--progress", action="store_true", help="add gpuq's progress callback")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(args.replicas)]
    )
    names = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(names)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.samples, args.features), dtype=np.float32)
    weights = rng.standard_normal((args.features, 1), dtype=np.float32)
    y = (x @ weights / np.sqrt(args.features)).astype("float32")
    with strategy.scope():
        layers: list[Any] = [keras.Input(shape=(args.features,))]
        layers += [keras.layers.Dense(units, activation="relu") for units in HIDDEN]
        model = keras.Sequential([*layers, keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse", metrics=["mae"])
    clock = Clock()
    callbacks: list[Any] = [clock]
    with tempfile.TemporaryDirectory() as scratch:
        if args.progress:
            from gpuq.progress import GpuqProgress

            callbacks.insert(0, timed(GpuqProgress(os.path.join(scratch, "events.jsonl"))))
        model.fit(x, y, epochs=args.epochs, batch_size=args.batch, callbacks=callbacks, verbose=0)
    report = {
        "began_at": BEGAN,
        "imported_at": IMPORTED,
        "first_step_at": clock.first_step_at,
        "epoch_ends": clock.epoch_ends,
        "replicas": strategy.num_replicas_in_sync,
        "callback_s": getattr(callbacks[0], "spent_s", None),
        "steps": clock.steps,
    }
    print(json.dumps(report), flush=True)


def timed(callback: Any) -> Any:
    """`callback` with the time spent in its per-step hook added up in `spent_s`."""
    inner = callback.on_train_batch_end
    callback.spent_s = 0.0

    def on_train_batch_end(batch: int, logs: dict[str, Any] | None = None) -> None:
        began = time.perf_counter()
        inner(batch, logs)
        callback.spent_s += time.perf_counter() - began

    callback.on_train_batch_end = on_train_batch_end
    return callback


class Clock(keras.callbacks.Callback):
    """Epoch ends, and the first step seen from the second step's begin hook: an end-of-step
    hook would make Keras wait for every step's results (no async dispatch)."""

    def __init__(self) -> None:
        super().__init__()
        self.first_step_at: float | None = None
        self.epoch_ends: list[float] = []
        self.steps = 0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch_ends.append(time.time())

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # Called before each step is dispatched; the second call means the first ran.
        self.steps += 1
        if self.steps == 2 and self.first_step_at is None:
            self.first_step_at = time.time()


if __name__ == "__main__":
    main()
