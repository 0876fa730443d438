"""A builtin Keras job on several nodes: one model, trained by a custom loop under
`MultiWorkerMirroredStrategy`.

Keras 3's `model.fit` does not work under MultiWorkerMirroredStrategy (keras#20585: its
train step reduces the loss with `strategy.reduce(..., axis=0)`, which fails there), and
its `BackupAndRestore` has no chief: every worker would write the same files. So this is
the loop MWMS's own documentation gives: `strategy.run` for each step over a dataset of
which each worker reads its own shard, per-sample losses scaled by the global batch, the
gradients summed across every replica on every node by the optimizer (Keras's
`_all_reduce_sum_gradients`). The chief (rank 0) alone writes checkpoints, TensorBoard,
progress events and the model; every worker restores from the chief's checkpoint.

A stop (SIGTERM on any node) is agreed on inside the step (the flag is all-reduced with
the loss), so every worker leaves after the same batch and none waits in an all-reduce
for a peer that has stopped.
"""

import hashlib
import json
import os
import signal
import time
from typing import Any

import numpy as np

from gpuq.caps.devices import DeviceMismatch, configure
from gpuq.contract.events import Event, EventWriter, finite
from gpuq.contract.exits import ExitCode
from gpuq.contract.rundir import RunDir
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import KerasSpec


def train_across_nodes(run: RunDir, runspec: RunSpec, events: EventWriter) -> int:
    spec, plan = runspec.spec.keras, runspec.devices
    assert spec is not None
    rank, nodes = int(os.environ["GPUQ_NODE_RANK"]), int(os.environ["GPUQ_NODES"])
    chief = rank == 0
    t0 = time.monotonic()
    import tensorflow as tf  # late: nothing may touch TensorFlow before the caps are known

    configure(tf, plan, one_worker_of_many=True)
    collective = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=collective.NCCL if plan.mode == "gpu" else collective.RING,
        timeout_seconds=runspec.collective_timeout_s,
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    if workers != nodes or strategy.cluster_resolver.task_id != rank:
        raise DeviceMismatch(
            f"MultiWorkerMirroredStrategy sees {workers} workers and this one as "
            f"{strategy.cluster_resolver.task_id}; gpuq started {nodes}, this one as {rank}"
        )
    # MWMS runs one replica per GPU of each worker, or one on its CPU (simulated GPUs).
    local = plan.replicas if plan.mode == "gpu" else 1
    replicas = strategy.num_replicas_in_sync
    if replicas != nodes * local:
        raise DeviceMismatch(
            f"MultiWorkerMirroredStrategy runs {replicas} replicas, expected {local} on each "
            f"of {nodes} nodes"
        )
    import keras

    from gpuq.progress import GpuqProgress
    from worker.checkpoints import Checkpoints
    from worker.train import SpecMismatch, model_and_data

    print(
        f"gpuq: worker {rank} of {nodes} in multi-worker mode: MultiWorkerMirroredStrategy, "
        f"{replicas} replica(s) in sync ({local} here), "
        f"{'NCCL' if plan.mode == 'gpu' else 'RING'} all-reduce, CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}, TensorFlow {tf.__version__}",
        flush=True,
    )
    events.emit(
        Event.started,
        num_replicas=replicas,
        devices=[f"worker {w}" for w in range(nodes)],
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        memory_limit_mb=plan.memory_limit_mb,
        tensorflow=tf.__version__,
        init_s=round(time.monotonic() - t0, 2),
    )
    keras.utils.set_random_seed(spec.seed)  # the same initial weights on every worker
    with strategy.scope():
        model, x, y = model_and_data(keras, spec, runspec.data_roots)
        model.optimizer.build(model.trainable_variables)
    train_samples = int(len(x) * (1 - spec.validation_split))
    x_train, y_train = x[:train_samples], y[:train_samples]
    x_val, y_val = x[train_samples:], y[train_samples:]
    # Each worker's shard: every `nodes`-th sample from its rank on. The shards' sizes
    # differ by one at most; every worker takes as many batches as the smallest allows.
    x_shard, y_shard = x_train[rank::nodes], y_train[rank::nodes]
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

    def shard(context: Any) -> Any:
        dataset = tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
        if spec.shuffle:
            dataset = dataset.shuffle(len(x_shard), seed=spec.seed + rank)
        return dataset.repeat().batch(per_replica, drop_remainder=True).prefetch(2)

    batches = iter(strategy.distribute_datasets_from_function(shard))
    loss_fn = keras.losses.get(spec.loss)
    metric_fns: dict[str, Any] = {name: _metric(keras, name, spec) for name in spec.metrics}

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

    events_path = os.environ.get("GPUQ_EVENTS", str(run.events))
    progress = GpuqProgress(
        events_path, batch_size=global_batch, samples=steps * global_batch, echo=chief
    )
    progress.set_model(model)
    progress.set_params({"epochs": spec.epochs, "steps": steps})
    signal.signal(signal.SIGTERM, lambda *_: setattr(progress, "stop_requested", True))
    backup = Checkpoints(run.checkpoints, cut_short=lambda: progress.epoch_cut_short)
    backup.set_model(model)
    backup.on_train_begin()  # every worker restores from the chief's checkpoint
    first_epoch = int(getattr(model, "_initial_epoch", 0) or 0)
    board = tf.summary.create_file_writer(str(run.tensorboard / "train")) if chief else None
    names = ["loss", *metric_fns]
    history: dict[str, list[float | None]] = {}
    progress.on_train_begin()
    for epoch in range(first_epoch, spec.epochs):
        progress.on_epoch_begin(epoch)
        totals = np.zeros(len(names))
        for step in range(steps):
            sums, stop = train_step(batches, tf.constant(float(progress.stop_requested)))
            totals += sums.numpy()
            seen = (step + 1) * global_batch
            progress.stop_requested = bool(stop.numpy() > 0)
            progress.on_train_batch_end(step, dict(zip(names, totals / seen, strict=True)))
            if progress.stopped_early:
                break
        logs = dict(zip(names, totals / ((step + 1) * global_batch), strict=True))
        if len(x_val) and not progress.stopped_early and chief:
            logs.update(_validate(model, x_val, y_val, loss_fn, metric_fns, per_replica))
        if chief:
            progress.on_epoch_end(epoch, logs)
            backup.on_epoch_end(epoch, logs)
            _summarise(tf, board, epoch, logs)
            for key, value in finite(logs).items():
                history.setdefault(key, []).append(value)
        if progress.stopped_early:
            break
    weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    seen = hashlib.sha256(x_shard.tobytes()).hexdigest()
    print(
        f"gpuq: worker {rank} of {nodes}: trained on its shard of {len(x_shard)} samples "
        f"(sha256 {seen[:16]}); final weights sha256 {weights[:16]}",
        flush=True,
    )
    if chief:
        model.save(run.artifacts / "model.keras")
        (run.artifacts / "history.json").write_text(json.dumps(history, allow_nan=False))
    if progress.stopped_early:
        print("gpuq: stopped on SIGTERM after the current batch", flush=True)
        events.emit(Event.stopped, message="stopped on request after the current batch")
        return ExitCode.stopped
    if chief:
        print(f"gpuq: trained on {nodes} nodes; saved {run.artifacts / 'model.keras'}", flush=True)
    events.emit(Event.finished, artifacts=["model.keras", "history.json"] if chief else [])
    return ExitCode.ok


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


def _validate(
    model: Any, x: Any, y: Any, loss_fn: Any, metric_fns: dict[str, Any], batch: int
) -> dict[str, float]:
    """`val_` metrics over the whole held-out set, on the chief alone (the weights are the
    same everywhere)."""
    sums = np.zeros(1 + len(metric_fns))
    for start in range(0, len(x), max(batch, 256)):
        xb, yb = x[start : start + max(batch, 256)], y[start : start + max(batch, 256)]
        predicted = model(xb, training=False)
        values = [loss_fn(yb, predicted), *(fn(yb, predicted) for fn in metric_fns.values())]
        sums += [float(np.sum(np.asarray(v))) for v in values]
    names = ["val_loss", *(f"val_{name}" for name in metric_fns)]
    return dict(zip(names, sums / len(x), strict=True))


def _summarise(tf: Any, board: Any, epoch: int, logs: dict[str, float]) -> None:
    if board is None:
        return
    with board.as_default():
        for key, value in logs.items():
            tf.summary.scalar(f"epoch_{key}", value, step=epoch)
    board.flush()
