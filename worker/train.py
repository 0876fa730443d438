"""The training process: parse the spec, configure devices, import TensorFlow, train, exit.

Run as `python -m worker.train RUN_DIR`. It writes progress to `events.jsonl` and the
model to `artifacts/`; its exit code (`gpuq.contract.exits`) tells the scheduler why it
ended. SIGTERM stops training after the current batch and still saves the model.
"""

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuq.caps.devices import DeviceMismatch, configure
from gpuq.contract.events import Event, EventWriter, finite
from gpuq.contract.exits import ExitCode
from gpuq.contract.rundir import RunDir
from gpuq.contract.runspec import RunSpec
from worker.data import BadData
from worker.model_data import SpecMismatch, model_and_data
from worker.multi_node import train_across_nodes


def main(argv: list[str]) -> int:
    run = RunDir(Path(argv[1]))
    # On several nodes, only the chief's events are the job's (`gpuq.contract.nodes`).
    on_other_node = os.environ.get("GPUQ_NODE_RANK", "0") != "0"
    events = EventWriter(os.environ["GPUQ_EVENTS"] if on_other_node else run.events)
    try:
        runspec = RunSpec.model_validate_json(run.spec.read_text())
    except (OSError, ValidationError) as exc:
        return _failed(events, ExitCode.invalid_spec, f"spec.json is unusable: {exc}")
    try:
        return train(run, runspec, events)
    except (SpecMismatch, BadData) as exc:
        return _failed(events, ExitCode.invalid_spec, str(exc))
    except DeviceMismatch as exc:
        return _failed(events, ExitCode.device_mismatch, str(exc))
    except MemoryError:
        return _failed(events, ExitCode.host_oom, "the training process ran out of host memory")
    except Exception as exc:
        traceback.print_exc()
        if type(exc).__name__ == "ResourceExhaustedError":
            return _failed(events, ExitCode.gpu_oom, _first_line(exc))
        return _failed(events, ExitCode.error, f"{type(exc).__name__}: {_first_line(exc)}")


def _failed(events: EventWriter, code: ExitCode, message: str) -> int:
    """Explains a failing exit in the events; the exit code alone says which reason it is."""
    events.emit(Event.failed, message=message)
    return code


def train(run: RunDir, runspec: RunSpec, events: EventWriter) -> int:
    """Trains the spec's Keras model on the devices of its plan (or hands a job on several
    nodes to `multi_node`), saves it to `artifacts/`; the exit code."""
    spec = runspec.spec.keras
    if spec is None:
        raise ValueError("worker.train runs kind keras only")
    if runspec.spec.resources.nodes > 1:
        return train_across_nodes(run, runspec, events)
    t0 = time.monotonic()
    import tensorflow as tf  # late: nothing may touch TensorFlow before the caps are known

    strategy, names = _mirrored_strategy(tf, runspec)
    import keras

    from gpuq.progress import GpuqProgress

    _announce(tf, runspec, events, strategy.num_replicas_in_sync, names, t0)
    keras.utils.set_random_seed(spec.seed)
    with strategy.scope():
        model, x, y = model_and_data(keras, spec, runspec.data_roots)
    train_samples = int(len(x) * (1 - spec.validation_split))
    progress = GpuqProgress(
        run.events, batch_size=spec.batch_size, samples=train_samples, echo=True
    )
    signal.signal(signal.SIGTERM, lambda *_: setattr(progress, "stop_requested", True))
    callbacks = _callbacks(keras, run, runspec, events, progress)
    from gpuq.batches import replica_batches

    batches, validation = replica_batches(
        strategy,
        x,
        y,
        batch_size=spec.batch_size,
        shuffle=spec.shuffle,
        validation_split=spec.validation_split,
    )
    history = model.fit(
        batches,
        epochs=spec.epochs,
        validation_data=validation,
        shuffle=False,  # the batches are shuffled already
        callbacks=callbacks,
        verbose=0,
    )
    return _save(run, events, model, history.history, stopped=progress.stopped_early)


def _mirrored_strategy(tf: Any, runspec: RunSpec) -> tuple[Any, list[str]]:
    """Applies the device plan; a `MirroredStrategy` over its replicas, and their names."""
    spec, plan = runspec.spec.keras, runspec.devices
    assert spec is not None
    names = configure(tf, plan)
    tf.config.set_soft_device_placement(spec.soft_device_placement)
    if spec.log_device_placement:
        tf.debugging.set_log_device_placement(True)
    cross_device_ops = None
    if plan.mode == "gpu" and plan.replicas_per_gpu > 1:
        # NCCL cannot all-reduce between logical GPUs that share one physical GPU.
        cross_device_ops = tf.distribute.HierarchicalCopyAllReduce()
    strategy = tf.distribute.MirroredStrategy(names, cross_device_ops=cross_device_ops)
    if strategy.num_replicas_in_sync != plan.replicas:
        raise DeviceMismatch(
            f"MirroredStrategy runs {strategy.num_replicas_in_sync} replicas, expected "
            f"{plan.replicas}"
        )
    return strategy, names


def _announce(
    tf: Any, runspec: RunSpec, events: EventWriter, replicas: int, names: list[str], t0: float
) -> None:
    """Tells the events and the log that training starts, and on what."""
    events.emit(
        Event.started,
        num_replicas=replicas,
        devices=names,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        memory_limit_mb=runspec.devices.memory_limit_mb,
        tensorflow=tf.__version__,
        init_s=round(time.monotonic() - t0, 2),
    )
    print(
        f"gpuq: job {runspec.job_id} attempt {runspec.attempt}: MirroredStrategy over "
        f"{replicas} replica(s) {names}, CUDA_VISIBLE_DEVICES="
        f"{os.environ.get('CUDA_VISIBLE_DEVICES')!r}, TensorFlow {tf.__version__}",
        flush=True,
    )


def _callbacks(
    keras: Any, run: RunDir, runspec: RunSpec, events: EventWriter, progress: Any
) -> list[Any]:
    """What `fit` calls back: the step watchdog (if the job has a step timeout), progress,
    checkpoints and TensorBoard, in that order."""
    # Progress first: an epoch is reported before it is checkpointed, so a retry that
    # resumes after the checkpoint never skips an epoch's metrics.
    from worker.checkpoints import Checkpoints

    backup = Checkpoints(run.checkpoints, cut_short=lambda: progress.epoch_cut_short)
    # Per epoch only: a per-batch summary would cost every step a write.
    tensorboard = keras.callbacks.TensorBoard(
        str(run.tensorboard), write_graph=False, profile_batch=0, update_freq="epoch"
    )
    callbacks = [progress, backup, tensorboard]
    if runspec.step_timeout_s:
        from worker.step_watchdog import StepWatchdog

        callbacks.insert(0, StepWatchdog(runspec.step_timeout_s, events))
    return callbacks


def _save(
    run: RunDir, events: EventWriter, model: Any, history: dict[str, list[float]], *, stopped: bool
) -> int:
    """Saves the model and its history to `artifacts/` and says how training ended (a stop
    on request, or all its epochs); the exit code."""
    model.save(run.artifacts / "model.keras")
    epochs = {key: [finite({key: v})[key] for v in values] for key, values in history.items()}
    (run.artifacts / "history.json").write_text(json.dumps(epochs, allow_nan=False))
    if stopped:
        print("gpuq: stopped on SIGTERM after the current batch; model saved", flush=True)
        events.emit(
            Event.stopped, message="stopped on request after the current batch; model saved"
        )
        return ExitCode.stopped
    print(f"gpuq: trained; saved {run.artifacts / 'model.keras'}", flush=True)
    events.emit(Event.finished, artifacts=["model.keras", "history.json"])
    return ExitCode.ok


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main(sys.argv))
