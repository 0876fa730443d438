"""The custom training loop of one worker of a multi-node Keras job (`multi_node`): its
shard of the training set, a step that runs on every replica and sums the loss, the metrics
and the stop flag over every replica on every node, and epochs of those steps. The chief
alone validates, reports progress, checkpoints and writes TensorBoard."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuq.contract.events import finite
from gpuq.contract.spec import KerasSpec
from worker.model_data import SpecMismatch


@dataclass(frozen=True)
class Shard:
    """This worker's share of the training set, the held-out set, and how they batch."""

    x: Any
    y: Any
    x_val: Any  #: the held-out set, whole on every worker (the chief alone uses it)
    y_val: Any
    per_replica: int  #: the samples each replica takes per step
    global_batch: int  #: the samples of one step over every replica of every node
    steps: int  #: steps per epoch, as many on every worker


def shard_of(
    x: Any, y: Any, spec: KerasSpec, *, rank: int, nodes: int, replicas: int, local: int
) -> Shard:
    """Worker `rank`'s shard of the data, for `replicas` in all and `local` on this node."""
    train_samples = int(len(x) * (1 - spec.validation_split))
    x_train, y_train = x[:train_samples], y[:train_samples]
    # Each worker's shard: every `nodes`-th sample from its rank on. The shards' sizes
    # differ by one at most; every worker takes as many batches as the smallest allows.
    per_replica = max(1, spec.batch_size // replicas)
    global_batch = per_replica * replicas
    steps = (train_samples // nodes) // (per_replica * local)
    if steps == 0:
        raise SpecMismatch(
            f"{train_samples} training samples over {nodes} nodes make no whole batch of "
            f"{global_batch}: lower batch_size or use more data"
        )
    if global_batch != spec.batch_size:
        print(
            f"gpuq: batch_size {spec.batch_size} is not a multiple of the {replicas} "
            f"replicas: each takes {per_replica}, a global batch of {global_batch}",
            flush=True,
        )
    return Shard(
        x_train[rank::nodes],
        y_train[rank::nodes],
        x[train_samples:],
        y[train_samples:],
        per_replica,
        global_batch,
        steps,
    )


class ShardLoop:
    """Epochs of steps over this worker's shard: each step runs on every replica, its
    per-sample losses scaled by the global batch, and the gradients are summed across every
    replica on every node by the optimizer."""

    def __init__(
        self,
        tf: Any,
        keras: Any,
        strategy: Any,
        model: Any,
        spec: KerasSpec,
        shard: Shard,
        rank: int,
    ) -> None:
        self.tf, self.model, self.shard = tf, model, shard
        datasets = self._datasets(spec, rank)
        self.batches = iter(strategy.distribute_datasets_from_function(datasets))
        self.loss_fn = keras.losses.get(spec.loss)
        self.metric_fns = {name: _metric(keras, name, spec) for name in spec.metrics}
        self.names = ["loss", *self.metric_fns]
        self.step = self._step_function(strategy)

    def _datasets(self, spec: KerasSpec, rank: int) -> Callable[[Any], Any]:
        """What makes each replica's dataset: this worker's shard, in batches, forever."""
        tf, shard = self.tf, self.shard

        def dataset(context: Any) -> Any:
            found = tf.data.Dataset.from_tensor_slices((shard.x, shard.y))
            if spec.shuffle:
                found = found.shuffle(len(shard.x), seed=spec.seed + rank)
            return found.repeat().batch(shard.per_replica, drop_remainder=True).prefetch(2)

        return dataset

    def _step_function(self, strategy: Any) -> Any:
        """One step on every replica; the loss's and metrics' per-sample sums, and the stop
        flag, summed over every replica on every node (so every worker stops alike)."""
        tf, model, loss_fn, metric_fns = self.tf, self.model, self.loss_fn, self.metric_fns
        global_batch = self.shard.global_batch

        @tf.function
        def train_step(iterator: Any, stop: Any) -> Any:
            def replica_step(features: Any, targets: Any, stop: Any) -> Any:
                with tf.GradientTape() as tape:
                    predicted = model(features, training=True)
                    per_sample = loss_fn(targets, predicted)
                    scaled = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
                grads = tape.gradient(scaled, model.trainable_variables)
                model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
                sums = [tf.reduce_sum(per_sample)]
                sums += [tf.reduce_sum(fn(targets, predicted)) for fn in metric_fns.values()]
                return tf.stack([tf.cast(s, tf.float32) for s in sums]), stop

            features, targets = next(iterator)
            sums, stop = strategy.run(replica_step, args=(features, targets, stop))
            return (
                strategy.reduce(tf.distribute.ReduceOp.SUM, sums, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, stop, axis=None),
            )

        return train_step

    def run(
        self, progress: Any, backup: Any, board: Any, epochs: range, *, chief: bool
    ) -> dict[str, list[float | None]]:
        """Trains `epochs`, until a stop is agreed on; the chief's history of each epoch's
        metrics (empty on the other workers)."""
        history: dict[str, list[float | None]] = {}
        progress.on_train_begin()
        for epoch in epochs:
            progress.on_epoch_begin(epoch)
            logs = self._epoch(progress)
            if len(self.shard.x_val) and not progress.stopped_early and chief:
                logs.update(self._validate())
            if chief:
                progress.on_epoch_end(epoch, logs)
                backup.on_epoch_end(epoch, logs)
                _summarise(self.tf, board, epoch, logs)
                for key, value in finite(logs).items():
                    history.setdefault(key, []).append(value)
            if progress.stopped_early:
                break
        if chief:
            backup.on_train_end()  # the last epoch's checkpoint on disk, or its error raised
        return history

    def _epoch(self, progress: Any) -> dict[str, float]:
        """One epoch's steps (fewer if a stop is agreed on); the loss and metrics, averaged
        over the samples they saw."""
        tf, global_batch = self.tf, self.shard.global_batch
        totals = np.zeros(len(self.names))
        for step in range(self.shard.steps):
            sums, stop = self.step(self.batches, tf.constant(float(progress.stop_requested)))
            totals += sums.numpy()
            seen = (step + 1) * global_batch
            progress.stop_requested = bool(stop.numpy() > 0)
            progress.on_train_batch_end(step, dict(zip(self.names, totals / seen, strict=True)))
            if progress.stopped_early:
                break
        return dict(zip(self.names, totals / ((step + 1) * global_batch), strict=True))

    def _validate(self) -> dict[str, float]:
        """`val_` metrics over the whole held-out set, on the chief alone (the weights are
        the same everywhere)."""
        x, y, metric_fns = self.shard.x_val, self.shard.y_val, self.metric_fns
        batch = max(self.shard.per_replica, 256)
        sums = np.zeros(1 + len(metric_fns))
        for start in range(0, len(x), batch):
            xb, yb = x[start : start + batch], y[start : start + batch]
            predicted = self.model(xb, training=False)
            values = [
                self.loss_fn(yb, predicted),
                *(fn(yb, predicted) for fn in metric_fns.values()),
            ]
            sums += [float(np.sum(np.asarray(v))) for v in values]
        names = ["val_loss", *(f"val_{name}" for name in metric_fns)]
        return dict(zip(names, sums / len(x), strict=True))


def _metric(keras: Any, name: str, spec: KerasSpec) -> Any:
    """A per-sample function for a metric of the spec, as Keras's `compile` resolves it."""
    if name == "accuracy":
        name = {
            "sparse_categorical_crossentropy": "sparse_categorical_accuracy",
            "categorical_crossentropy": "categorical_accuracy",
            "binary_crossentropy": "binary_accuracy",
        }.get(spec.loss, "accuracy")
    if name == "accuracy":
        return lambda y, p: keras.ops.mean(
            keras.ops.cast(keras.ops.equal(keras.ops.cast(y, p.dtype), p), "float32"), axis=-1
        )
    functions = {
        "mae": keras.metrics.mean_absolute_error,
        "mse": keras.metrics.mean_squared_error,
        "sparse_categorical_accuracy": keras.metrics.sparse_categorical_accuracy,
        "categorical_accuracy": keras.metrics.categorical_accuracy,
        "binary_accuracy": keras.metrics.binary_accuracy,
    }
    return functions[name]


def _summarise(tf: Any, board: Any, epoch: int, logs: dict[str, float]) -> None:
    if board is None:
        return
    with board.as_default():
        for key, value in logs.items():
            tf.summary.scalar(f"epoch_{key}", value, step=epoch)
    board.flush()
