"""`gpuq.replica_batches`: what `model.fit(x, y, ...)` trains on, for each replica."""

import json
import subprocess
import sys

import pytest

#: real Keras training under MirroredStrategy: `make test` runs it, `make check` does not
pytestmark = pytest.mark.e2e

#: Run in a fresh interpreter: TensorFlow's devices are set once per process.
PROGRAM = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
import keras, numpy as np
from gpuq import replica_batches

x = np.arange(24, dtype="float32").reshape(12, 2)
y = np.arange(12, dtype="float32").reshape(12, 1)
batches, validation = replica_batches(strategy, x, y, batch_size=5, shuffle=False)
local = strategy.experimental_local_results
shares = [[[int(row) for row in part.numpy()[:, 0]] for part in local(y)] for _, y in batches]

def trained(fit_on):
    keras.utils.set_random_seed(3)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
        model.compile("adam", "mse")
    return fit_on(model).history

def ours(model):
    train, held_out = replica_batches(strategy, a, b, batch_size=16, validation_split=0.2)
    return model.fit(train, validation_data=held_out, shuffle=False, epochs=3, verbose=0)

rng = np.random.default_rng(0)
a = rng.standard_normal((203, 8), dtype=np.float32)
b = rng.standard_normal((203, 1), dtype=np.float32)
plain = trained(lambda m: m.fit(a, b, epochs=3, batch_size=16, validation_split=0.2, verbose=0))
ours = trained(ours)
print(json.dumps({"shares": shares, "validation": validation, "plain": plain, "ours": ours}))
"""


def test_each_replica_gets_its_share_of_every_batch_and_fit_learns_what_it_would_have():
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    # Batches of 5, 5 and 2 rows, in order: ceil(rows / 2) to the first replica, the rest
    # to the second.
    assert got["shares"] == [[[0, 1, 2], [3, 4]], [[5, 6, 7], [8, 9]], [[10], [11]]]
    assert got["validation"] is None
    # Shuffled, split for validation, a short last batch: the losses plain `fit` gets.
    assert got["ours"] == got["plain"]
    assert set(got["plain"]) == {"loss", "val_loss"} and len(got["plain"]["loss"]) == 3
