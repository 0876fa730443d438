"""One model trained on several nodes with TensorFlow's MultiWorkerMirroredStrategy, as a
command job with `resources.nodes` (Slurm executor): gpuq gives every node `TF_CONFIG`
(worker 0 is the chief), `GPUQ_NODE_RANK` and `GPUQ_NODES`.

It uses a custom training loop (`strategy.run`), the path MWMS documents: Keras 3's
`model.fit` does not work under MultiWorkerMirroredStrategy (keras#20585). Each worker
trains on its own shard of the data; the optimizer sums the gradients of every replica on
every node, so all workers end with the same weights. The script checks that (an
all-reduce of the weights, and a model trained on this worker's shard alone must differ)
and exits 1 if it fails. Only the chief saves (`GPUQ_ARTIFACTS_DIR`).

    gpuq run --nodes 2 -- python examples/tf_multi_worker.py
"""

import argparse
import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--batch-size", type=int, default=32, help="global, over all replicas")
args = parser.parse_args()

rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()  # before any other TensorFlow op
workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
replicas = strategy.num_replicas_in_sync
print(f"worker {rank} of {workers}: {replicas} replicas in sync", flush=True)

import keras  # noqa: E402  (after the strategy: it must come first)

# The same data and initial weights everywhere; each worker trains on its own shard.
rng = np.random.default_rng(0)
x = rng.standard_normal((workers * 256, 4)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
x_shard, y_shard = x[rank::workers], y[rank::workers]
per_replica = args.batch_size // replicas


def dataset(_context: tf.distribute.InputContext) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((x_shard, y_shard)).repeat().batch(per_replica)


def new_model() -> keras.Model:
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.optimizer = keras.optimizers.SGD(0.05)
    model.optimizer.build(model.trainable_variables)
    return model


with strategy.scope():
    model = new_model()
batches = iter(strategy.distribute_datasets_from_function(dataset))


@tf.function
def train_step(iterator: object) -> tf.Tensor:
    def step(features: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_sample = keras.losses.mean_squared_error(targets, model(features))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=args.batch_size)
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    return strategy.reduce("SUM", strategy.run(step, args=next(iterator)), axis=None)


for _ in range(args.steps):
    loss = train_step(batches)
print(f"worker {rank}: loss after {args.steps} steps {float(loss):.4f}", flush=True)

weights = np.concatenate([w.ravel() for w in model.get_weights()])


@tf.function
def summed(local: tf.Tensor) -> tf.Tensor:
    return strategy.reduce("SUM", strategy.run(lambda v: tf.identity(v), args=(local,)), axis=None)


# The all-reduce check: the sum over all replicas is `replicas` times this worker's weights
# only if every worker holds the same ones.
same_everywhere = np.allclose(summed(tf.constant(weights)).numpy(), replicas * weights)
# A model trained on this worker's shard alone, from the same start, ends elsewhere.
alone = new_model()
for start in range(0, args.steps * per_replica, per_replica):
    i = start % len(x_shard)
    with tf.GradientTape() as tape:
        xb, yb = x_shard[i : i + per_replica], y_shard[i : i + per_replica]
        loss = tf.reduce_mean(keras.losses.mean_squared_error(yb, alone(xb)))
    grads = tape.gradient(loss, alone.trainable_variables)
    alone.optimizer.apply_gradients(zip(grads, alone.trainable_variables, strict=True))
differs = not np.allclose(np.concatenate([w.ravel() for w in alone.get_weights()]), weights)
digest = hashlib.sha256(weights.tobytes()).hexdigest()[:16]
if not (same_everywhere and differs):
    print(
        f"worker {rank}: all-reduce check FAILED (same on all workers: {same_everywhere}, "
        f"differs from this shard alone: {differs})",
        flush=True,
    )
    sys.exit(1)
print(f"worker {rank}: all-reduce check passed; weights sha256 {digest}", flush=True)
if rank == 0:
    out = os.path.join(os.environ.get("GPUQ_ARTIFACTS_DIR", "."), "model.weights.h5")
    model.save_weights(out)
    print(f"chief saved {out}", flush=True)
