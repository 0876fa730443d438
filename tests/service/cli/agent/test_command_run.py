"""`run_command`'s arguments as the spec `gpuq run` would send: units read, the program
found, sweep values kept as typed, and each refusal naming the argument."""

import sys

import pytest

from gpuq.contract.sweep import SweepSpec
from service.cli.agent.command_run import CommandRun, spec_of


def test_the_arguments_become_gpuq_runs_spec(tmp_path):
    run = CommandRun(
        program=sys.executable,
        args=["train.py", "--opt", "{opt}"],
        folder=str(tmp_path),
        gpus=2,
        memory="8G",
        time_limit="1h30m",
        env={"SEED": "7"},
        sweep={"opt": ["adam,beta=0.9", "sgd"], "lr": [0.001, 1]},
        metric="val_loss",
        early_stopping=True,
    )
    spec = spec_of(run)
    assert spec["command"]["argv"] == [sys.executable, "train.py", "--opt", "{opt}"]
    assert spec["command"]["workdir"] == str(tmp_path)
    assert spec["command"]["env"]["SEED"] == "7"
    assert spec["resources"] == {"gpus": 2, "memory_mb": 8192}
    assert spec["time_limit_s"] == 5400
    # a value with a comma stays one value; numbers stay numbers
    assert spec["sweep"]["parameters"] == {"opt": ["adam,beta=0.9", "sgd"], "lr": [0.001, 1]}
    assert SweepSpec.model_validate(spec).sweep.early_stopping is not None


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"memory": "lots"}, "memory: 'lots' is not a memory size"),
        ({"time_limit": "soon"}, "time_limit:"),
        ({"folder": "relative"}, "folder: 'relative' is not an absolute path"),
        ({"program": "no-such-program-anywhere"}, "program:"),
        ({"env": {"GPUQ_JOB_ID": "1"}}, "env: GPUQ_JOB_ID is gpuq's to set"),
        ({"gpus": 1, "gpu_ids": [0, 1]}, "gpus:"),
    ],
)
def test_a_refused_value_names_its_argument(tmp_path, given, words):
    run = CommandRun.model_validate({"program": "true", "folder": str(tmp_path), **given})
    with pytest.raises(ValueError, match=words):
        spec_of(run)
