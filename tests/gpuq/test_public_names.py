"""What users import comes from the one name `gpuq`, without slowing a job's start."""

import json
import subprocess
import sys

import pytest

import gpuq
from gpuq import client, http, reporting
from gpuq.contract import spec


def test_users_names_come_from_gpuq():
    assert gpuq.Gpuq is client.Gpuq
    assert gpuq.ApiError is http.ApiError
    assert gpuq.JobSpec is spec.JobSpec
    assert gpuq.report is reporting.report
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = gpuq.Nope


def test_importing_gpuq_or_a_runner_loads_no_third_party_library():
    code = (
        "import sys, gpuq, worker.runner, worker.launcher; "
        "print(sorted(m for m in ('pydantic', 'httpx', 'numpy', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_report_appends_one_epoch_line_and_does_nothing_outside_gpuq(tmp_path, monkeypatch):
    events = tmp_path / "events.jsonl"
    monkeypatch.delenv("GPUQ_EVENTS", raising=False)
    gpuq.report(1, loss=1.0)
    assert not events.exists()
    monkeypatch.setenv("GPUQ_EVENTS", str(events))
    gpuq.report(3, val_loss=0.25, acc=float("nan"))
    (line,) = [json.loads(x) for x in events.read_text().splitlines()]
    assert (line["event"], line["epoch"], line["metrics"]) == (
        "epoch",
        3,
        {"val_loss": 0.25, "acc": None},
    )
