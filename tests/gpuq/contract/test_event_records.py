import json
import math

import pytest

from gpuq.contract import event_records
from gpuq.contract.event_records import MAX_INT, MAX_METRICS, MAX_NAME_CHARS
from gpuq.contract.events import Event, EventWriter


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_what_gpuqs_own_writers_emit_passes(tmp_path):
    # As worker/train.py, worker/runner.py and worker/step_watchdog.py write them.
    writer = EventWriter(tmp_path / "events.jsonl")
    writer.emit(Event.running, pid=1234)
    writer.emit(
        Event.started,
        num_replicas=2,
        devices=["/device:CPU:0", "/device:CPU:1"],
        cuda_visible_devices="",
        memory_limit_mb=None,
        tensorflow="2.17.0",
        init_s=1.25,
    )
    writer.emit(Event.failed, message="ResourceExhaustedError: OOM when allocating")
    writer.emit(Event.stopped, message="stopped on request after the current batch")
    writer.emit(Event.resumed, epoch=2)
    writer.emit(Event.finished, artifacts=["model.keras", "history.json"])
    writer.close()
    parsed = [event_records.parse(line) for line in lines(tmp_path / "events.jsonl")]
    assert [type(p).__name__ for p in parsed] == [
        "RunningRecord",
        "StartedRecord",
        "FailedRecord",
        "StoppedRecord",
        "NoneType",  # resumed and finished: the service does not read them
        "NoneType",
    ]
    assert parsed[1].num_replicas == 2


def test_what_the_keras_callback_emits_passes(tmp_path):
    # GpuqProgress, as builtin jobs and users' own scripts use it: NaN metrics, steps
    # unknown (no `steps` from Keras), a resumed run.
    from gpuq.progress import GpuqProgress

    path = tmp_path / "events.jsonl"
    for steps in (4, None):
        callback = GpuqProgress(path, batch_size=32, samples=100, step_interval_s=0.0)
        callback.params = {"epochs": 3, "steps": steps}
        callback.on_train_begin()
        callback.on_epoch_begin(1)  # resumed from the checkpoint of epoch 1
        callback.on_train_batch_end(0, {"loss": 0.5, "mae": float("nan")})
        callback.on_epoch_end(1, {"loss": 0.4, "val_loss": float("inf"), "mae": 1})
    written = lines(path)
    assert [e["event"] for e in written] == ["resumed", "step", "epoch"] * 2
    for line in written:
        event_records.parse(line)
    epoch = event_records.parse(written[2])
    assert isinstance(epoch, event_records.EpochRecord)
    assert epoch.metrics == {"loss": 0.4, "val_loss": None, "mae": 1.0}
    assert epoch.progress is not None and epoch.progress.epochs == 3


@pytest.mark.parametrize(
    "line",
    [
        "x",
        None,
        ["step"],
        {"event": "step", "step": "x"},
        {"event": "step", "epoch": "1"},
        {"event": "step", "epoch": 1.5},
        {"event": "step", "step": True},
        {"event": "step", "step": -1},
        {"event": "step", "step": MAX_INT + 1},
        {"event": "epoch", "epoch": 10**30},
        {"event": "epoch", "progress": "x"},
        {"event": "epoch", "progress": {"epoch": "x"}},
        {"event": "epoch", "progress": {"fraction": "half"}},
        {"event": "epoch", "progress": {"eta_s": [1]}},
        {"event": "epoch", "metrics": [1, 2]},
        {"event": "epoch", "metrics": {"loss": "0.5"}},
        {"event": "epoch", "metrics": {"loss": "x" * 1_000_000}},
        {"event": "epoch", "metrics": {"loss": {"nested": 1}}},
        {"event": "epoch", "metrics": {"loss": True}},
        {"event": "epoch", "metrics": {"loss": 10**400}},
        {"event": "epoch", "metrics": {"": 1}},
        {"event": "epoch", "metrics": {"x" * (MAX_NAME_CHARS + 1): 1}},
        {"event": "epoch", "metrics": {f"m{i}": 1 for i in range(MAX_METRICS + 1)}},
        {"event": "epoch", "metrics": {"lo\0ss": 1}},
        {"event": "epoch", "metrics": {"lo\ud800ss": 1}},
        {"event": "started", "num_replicas": "2"},
        {"event": "started", "num_replicas": 0},
        {"event": "started", "num_replicas": 2**63},
        {"event": "failed", "message": 5},
        {"event": "failed", "message": {"text": "x"}},
        {"event": "stopped", "message": "a\0b"},
    ],
)
def test_a_line_that_breaks_the_contract_is_refused(line):
    with pytest.raises(ValueError):
        event_records.parse(line)


def test_within_the_bounds_passes_and_non_finite_numbers_read_as_null():
    names = {"x" * MAX_NAME_CHARS: 1} | {f"m{i}": i for i in range(MAX_METRICS - 1)}
    step = event_records.parse(
        {
            "event": "step",
            "epoch": MAX_INT,
            "step": 0,
            "metrics": names | {"m0": math.nan},
            "progress": {"fraction": math.inf, "eta_s": 3, "extra": "not read"},
            "from_a_user": {"nested": [1, 2]},
        }
    )
    assert isinstance(step, event_records.StepRecord)
    assert step.metrics is not None and len(step.metrics) == MAX_METRICS
    assert step.metrics["m0"] is None
    assert step.progress is not None
    assert step.progress.model_dump(exclude_unset=True) == {"fraction": None, "eta_s": 3.0}


def test_kinds_the_service_does_not_read_pass_unread():
    for line in ({"event": "finished", "artifacts": 5}, {"event": "mine"}, {"event": 5}, {}):
        assert event_records.parse(line) is None
