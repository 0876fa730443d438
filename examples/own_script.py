"""A user's own training script, run by gpuq as a `command` job (examples/command-demo.json).

gpuq applies the job's GPU memory caps when this script imports TensorFlow, and
`GpuqProgress` reports epochs and metrics back to gpuq (it does nothing outside gpuq).
`replica_batches` hands the replicas their batches without the tf.distribute iterator that
`fit(x, y)` would use, which can crash at an epoch boundary (docs/jobs/own-scripts.md).
"""

import keras
import numpy as np
import tensorflow as tf

from gpuq import GpuqProgress, replica_batches

# On real GPUs MirroredStrategy() finds the assigned GPUs by itself; on simulated ones each
# GPU is a logical CPU device.
gpus = tf.config.list_logical_devices("GPU")
devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
strategy = tf.distribute.MirroredStrategy(devices)
print(f"training on {strategy.num_replicas_in_sync} replicas: {devices}", flush=True)

rng = np.random.default_rng(0)
x = rng.standard_normal((4096, 32)).astype("float32")
y = x @ rng.standard_normal((32, 1)).astype("float32")
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse", metrics=["mae"])
batches, validation = replica_batches(strategy, x, y, batch_size=256, validation_split=0.1)
model.fit(
    batches,
    validation_data=validation,
    shuffle=False,  # replica_batches shuffled them
    epochs=4,
    verbose=0,
    callbacks=[GpuqProgress(batch_size=256)],
)
model.save("model.keras")
print("saved model.keras in", __import__("os").getcwd(), flush=True)
