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

from gpuq.caps.devices import DeviceMismatch, configure
from gpuq.contract.events import Event, EventWriter
from gpuq.contract.exits import ExitCode
from gpuq.contract.rundir import RunDir
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import KerasSpec
from worker.model_data import model_and_data
from worker.multi_node_loop import Shard, ShardLoop, shard_of


def train_across_nodes(run: RunDir, runspec: RunSpec, events: EventWriter) -> int:
    """Trains the spec's model as worker GPUQ_NODE_RANK of GPUQ_NODES, the chief saving it
    to `artifacts/`; the exit code."""
    spec = runspec.spec.keras
    assert spec is not None
    rank, nodes = int(os.environ["GPUQ_NODE_RANK"]), int(os.environ["GPUQ_NODES"])
    chief = rank == 0
    t0 = time.monotonic()
    import tensorflow as tf  # late: nothing may touch TensorFlow before the caps are known

    strategy, local = _multi_worker_strategy(tf, runspec, rank, nodes)
    replicas = strategy.num_replicas_in_sync
    import keras

    _announce_worker(tf, runspec, events, rank, nodes, replicas, local, t0)
    keras.utils.set_random_seed(spec.seed)  # the same initial weights on every worker
    with strategy.scope():
        model, x, y = model_and_data(keras, spec, runspec.data_roots)
        model.optimizer.build(model.trainable_variables)
    shard = shard_of(x, y, spec, rank=rank, nodes=nodes, replicas=replicas, local=local)
    loop = ShardLoop(tf, keras, strategy, model, spec, shard, rank)
    progress, backup, first_epoch = _progress_and_checkpoints(run, spec, model, shard, chief)
    board = tf.summary.create_file_writer(str(run.tensorboard / "train")) if chief else None
    history = loop.run(progress, backup, board, range(first_epoch, spec.epochs), chief=chief)
    _log_weights(model, shard, rank, nodes)
    if chief:
        model.save(run.artifacts / "model.keras")
        (run.artifacts / "history.json").write_text(json.dumps(history, allow_nan=False))
    return _say_how_it_ended(run, events, nodes, stopped=progress.stopped_early, chief=chief)


def _multi_worker_strategy(tf: Any, runspec: RunSpec, rank: int, nodes: int) -> tuple[Any, int]:
    """Applies the device plan; a `MultiWorkerMirroredStrategy` over every node, checked to
    see the nodes and replicas gpuq started, and how many of its replicas run here."""
    plan = runspec.devices
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
    return strategy, local


def _announce_worker(
    tf: Any,
    runspec: RunSpec,
    events: EventWriter,
    rank: int,
    nodes: int,
    replicas: int,
    local: int,
    t0: float,
) -> None:
    """Tells the log and the events that this worker starts training, and on what."""
    plan = runspec.devices
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


def _progress_and_checkpoints(
    run: RunDir, spec: KerasSpec, model: Any, shard: Shard, chief: bool
) -> tuple[Any, Any, int]:
    """Progress (echoed by the chief; SIGTERM asks it to stop) and checkpoints, the model
    restored from the chief's last one on every worker; and the epoch to start from."""
    from gpuq.progress import GpuqProgress
    from worker.checkpoints import Checkpoints

    events_path = os.environ.get("GPUQ_EVENTS", str(run.events))
    progress = GpuqProgress(
        events_path,
        batch_size=shard.global_batch,
        samples=shard.steps * shard.global_batch,
        echo=chief,
    )
    progress.set_model(model)
    progress.set_params({"epochs": spec.epochs, "steps": shard.steps})
    signal.signal(signal.SIGTERM, lambda *_: setattr(progress, "stop_requested", True))
    backup = Checkpoints(run.checkpoints, cut_short=lambda: progress.epoch_cut_short)
    backup.set_model(model)
    backup.on_train_begin()  # every worker restores from the chief's checkpoint
    return progress, backup, int(getattr(model, "_initial_epoch", 0) or 0)


def _log_weights(model: Any, shard: Shard, rank: int, nodes: int) -> None:
    """Tells the log what this worker trained on and the weights it ended with (the same on
    every worker)."""
    weights = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()
    seen = hashlib.sha256(shard.x.tobytes()).hexdigest()
    print(
        f"gpuq: worker {rank} of {nodes}: trained on its shard of {len(shard.x)} samples "
        f"(sha256 {seen[:16]}); final weights sha256 {weights[:16]}",
        flush=True,
    )


def _say_how_it_ended(
    run: RunDir, events: EventWriter, nodes: int, *, stopped: bool, chief: bool
) -> int:
    """Says how training ended (a stop on request, or all its epochs); the exit code."""
    if stopped:
        print("gpuq: stopped on SIGTERM after the current batch", flush=True)
        events.emit(Event.stopped, message="stopped on request after the current batch")
        return ExitCode.stopped
    if chief:
        print(f"gpuq: trained on {nodes} nodes; saved {run.artifacts / 'model.keras'}", flush=True)
    events.emit(Event.finished, artifacts=["model.keras", "history.json"] if chief else [])
    return ExitCode.ok
