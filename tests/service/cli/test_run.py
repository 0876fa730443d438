"""What `gpuq run` and `gpuq shell` make of what people type, before anything is sent."""

import json
from datetime import UTC, datetime

import httpx
import pytest

from gpuq.contract.spec import JobSpec
from gpuq.contract.sweep import SweepSpec
from gpuq.http import Client
from service.cli import units
from service.cli.follow import exit_code_of, state_line
from service.cli.main import main
from service.cli.run_spec import BadOption, RunOptions, build_spec, default_name, travelling


@pytest.mark.parametrize(
    ("text", "mib"),
    [("8GiB", 8192), ("8G", 8192), ("8gb", 8192), ("8192M", 8192), ("8192", 8192), ("7.5G", 7680)],
)
def test_memory_sizes_are_read_as_people_write_them(text, mib):
    assert units.mebibytes(text) == mib


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2h30m", 9000),
        ("90m", 5400),
        ("45s", 45),
        ("1d", 86400),
        ("1:30:00", 5400),
        ("30:00", 1800),
    ],
)
def test_durations_are_read_as_people_write_them(text, seconds):
    assert units.seconds(text) == seconds


@pytest.mark.parametrize("text", ["8X", "-1", "0.0001M", "G"])
def test_a_size_that_is_none_says_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"8GiB|less than 1 MiB"):
        units.mebibytes(text)


@pytest.mark.parametrize("text", ["60", "2x", "0s", "1:99x"])
def test_a_duration_that_is_none_says_how_to_write_one(text):
    with pytest.raises(ValueError, match=r"2h30m|no time"):
        units.seconds(text)


def test_a_time_of_day_is_the_next_one_and_an_iso_time_keeps_its_zone():
    now = datetime(2026, 11, 24, 20, 0, tzinfo=UTC)
    assert units.parse_moment("18:00", now).astimezone(UTC).date().day in (24, 25)
    assert units.parse_moment("18:00", now) > now
    assert units.parse_moment("2026-11-25T06:00Z", now) == datetime(2026, 11, 25, 6, tzinfo=UTC)
    with pytest.raises(ValueError, match="not a time"):
        units.parse_moment("tomorrow", now)


CALLER = {
    "PATH": "/opt/venv/bin:/usr/bin:/bin",
    "VIRTUAL_ENV": "/opt/venv",
    "CONDA_PREFIX": "/opt/conda",
    "LANG": "en_GB.UTF-8",
    "LC_TIME": "de_DE.UTF-8",
    "TERM": "xterm-256color",
    "HOME": "/home/ana",
    "CUDA_VISIBLE_DEVICES": "3",
    "GPUQ_TOKEN": "secret-token",
    "AWS_SECRET_ACCESS_KEY": "secret-key",
    "WANDB_API_KEY": "named-by-the-user",
}


def test_only_the_named_environment_travels():
    assert travelling(CALLER, session=False) == {
        k: CALLER[k] for k in ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "LANG", "LC_TIME")
    }
    assert travelling(CALLER, session=True)["TERM"] == "xterm-256color"


def test_the_spec_carries_the_program_found_on_the_callers_path_and_the_options():
    options = RunOptions(gpus=2, mem_mb=8192, time_s=60, after=[3], env=["WANDB_API_KEY", "X=1"])
    spec = build_spec("command", ["sh", "-c", "exit 0"], options, cwd="/work", environ=CALLER)
    JobSpec.model_validate(spec, strict=False)
    assert spec["command"]["argv"][0] in ("/usr/bin/sh", "/bin/sh")
    assert spec["command"]["workdir"] == "/work"
    assert spec["command"]["env"]["WANDB_API_KEY"] == "named-by-the-user"
    assert spec["command"]["env"]["X"] == "1"
    assert "AWS_SECRET_ACCESS_KEY" not in spec["command"]["env"]
    assert spec["resources"] == {"gpus": 2, "memory_mb": 8192}
    assert (spec["depends_on"], spec["time_limit_s"]) == ([3], 60)


@pytest.mark.parametrize(
    ("options", "argv", "option"),
    [
        (RunOptions(env=["NOT_SET_HERE"]), ["sh"], "--env"),
        (RunOptions(env=["CUDA_VISIBLE_DEVICES=0"]), ["sh"], "--env"),
        (RunOptions(env=["GPUQ_JOB_ID=7"]), ["sh"], "--env"),
        (RunOptions(), ["no-such-program-anywhere"], "PROGRAM"),
        (RunOptions(gpus=2, gpu_ids=[0]), ["sh"], "--gpus"),
        (RunOptions(priority=5000), ["sh"], "--priority"),
        (RunOptions(retries=50), ["sh"], "--retries"),
        (RunOptions(name="no/slashes"), ["sh"], "--name"),
        (RunOptions(cpus=0), ["sh"], "--cpus"),
        (RunOptions(cpus=5000), ["sh"], "--cpus"),
        (RunOptions(host_memory_mb=8), ["sh"], "--host-mem"),
    ],
)
def test_a_value_the_spec_refuses_names_its_option(options, argv, option):
    with pytest.raises(BadOption) as refused:
        build_spec("command", argv, options, cwd="/", environ=CALLER)
    assert refused.value.option == option


def test_names_come_from_the_script():
    assert default_name(["python3.12", "train.py", "--lr", "3"]) == "train.py"
    assert default_name(["/usr/bin/python", "-c", "print()"]) == "python"
    assert default_name(["./run it!.sh"]) == "run it_.sh"


def _unreachable() -> Client:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing may be sent, but {request.url} was")

    return Client(http=httpx.Client(base_url="http://gpuq", transport=httpx.MockTransport(refuse)))


def test_dry_run_json_prints_the_spec_and_sends_nothing(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code = main(
        ["run", "--dry-run", "--json", "--gpus", "1", "--", "sh", "-c", "true"], api=_unreachable()
    )
    assert code == 0
    spec = json.loads(capsys.readouterr().out)
    assert JobSpec.model_validate(spec, strict=False).command.workdir == str(tmp_path)


@pytest.mark.parametrize(
    "command", [["run", "--dry-run", "--json"], ["shell", "--dry-run", "--json"]]
)
def test_cores_and_host_memory_are_read_with_their_units(capsys, monkeypatch, tmp_path, command):
    monkeypatch.chdir(tmp_path)
    args = [*command, "--gpus", "1", "--cpus", "0.5", "--host-mem", "32G", "--", "sh"]
    assert main(args, api=_unreachable()) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["resources"] == {"gpus": 1, "cpus": 0.5, "host_memory_mb": 32768}
    assert JobSpec.model_validate(spec, strict=False).resources.cpus == 0.5


def test_a_sweep_from_the_command_line_is_a_grid_of_typed_values(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    args = ["run", "--dry-run", "--json", "--sweep", "lr=1e-3,1e-4", "--sweep", "act=relu,gelu"]
    args += ["--sweep", "bs=32,64", "--max-parallel", "2", "--metric", "val_loss"]
    args += ["--mode", "min", "--early-stopping", "--", "sh", "-c", "echo {lr} {bs}"]
    assert main(args, api=_unreachable()) == 0
    spec = json.loads(capsys.readouterr().out)
    assert spec["sweep"] == {
        "parameters": {"lr": [0.001, 0.0001], "act": ["relu", "gelu"], "bs": [32, 64]},
        "mode": "min",
        "max_parallel": 2,
        "metric": "val_loss",
        "early_stopping": {"rule": "median"},
    }
    assert spec["command"]["argv"][-1] == "echo {lr} {bs}"  # the service puts them in
    SweepSpec.model_validate(spec, strict=False)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "--mem", "lots", "--", "sh"], "'--mem'"),
        (["run", "--cpus", "four", "--", "sh"], "'--cpus'"),
        (["run", "--cpus", "-1", "--", "sh"], "'--cpus'"),
        (["shell", "--cpus", "0"], "'--cpus'"),
        (["run", "--host-mem", "32X", "--", "sh"], "'--host-mem'"),
        (["shell", "--host-mem", "lots"], "'--host-mem'"),
        (["run", "--host-mem", "8M", "--", "sh"], "'--host-mem'"),
        (["run", "--time", "90", "--", "sh"], "'--time'"),
        (["run", "--gpu-ids", "0,x", "--", "sh"], "'--gpu-ids'"),
        (["run", "--not-before", "25:61", "--", "sh"], "'--not-before'"),
        (["run", "--"], "PROGRAM"),
        (["shell", "--detach"], "'--detach'"),
        (["shell", "--retries", "1"], "'--retries'"),
        (["run", "--sweep", "lr", "--", "sh"], "'--sweep'"),
        (["run", "--sweep", "lr=", "--", "sh"], "'--sweep'"),
        (["run", "--sweep", "lr=1", "--sweep", "lr=2", "--", "sh"], "'--sweep'"),
        (["run", "--max-parallel", "2", "--", "sh"], "'--max-parallel'"),
        (["run", "--metric", "loss", "--", "sh"], "'--metric'"),
        (["run", "--sweep", "a=1", "--mode", "best", "--", "sh"], "'--mode'"),
        (["run", "--sweep", "a=1", "--dry-run", "--", "sh"], "'--dry-run'"),
        (["shell", "--sweep", "a=1"], "'--sweep'"),
    ],
)
def test_a_bad_value_is_exit_2_naming_the_option_before_anything_is_sent(
    capsys, monkeypatch, args, option
):
    monkeypatch.setenv("COLUMNS", "300")
    assert main(args, api=_unreachable()) == 2
    assert f"Invalid value for {option}" in capsys.readouterr().err


def _job(**fields):
    return {"id": 7, "status": "failed", "reason": None, "exit_code": None, **fields}


@pytest.mark.parametrize(
    ("job", "code"),
    [
        (_job(status="succeeded", exit_code=0), 0),
        (_job(reason="nonzero_exit", exit_code=3), 3),
        (_job(reason="signal", exit_signal=15), 143),
        (_job(reason="host_oom", exit_signal=9), 137),
        (_job(status="cancelled", reason="cancelled_by_user"), 121),
        (_job(status="cancelled", reason="terminal_closed"), 121),
        (_job(reason="memory_cap_exceeded"), 122),
        (_job(reason="idle"), 122),
        (_job(reason="worker_lost"), 123),
        (_job(status="timed_out", reason="time_limit"), 124),
        (_job(reason="launch_error", exit_code=127), 127),
    ],
)
def test_the_exit_code_tells_how_the_job_ended(job, code):
    assert exit_code_of(job) == code


def test_a_state_line_says_where_it_runs_or_why_it_waits():
    queued = _job(status="queued", queue_position=3, wait_reason="waiting for 1 GPU")
    assert state_line(queued) == "job 7 queued: 3rd in line, waiting for 1 GPU"
    running = _job(status="running", assigned_gpus=[0, 2], spec={"resources": {"memory_mb": 8192}})
    assert state_line(running) == "job 7 running on GPUs 0,2 (8192 MiB each)"
    assert state_line(_job(status="starting", assigned_gpus=[])) == "job 7 starting on the CPU"


def test_a_state_line_under_slurm_names_the_slurm_job_then_the_nodes():
    handed = _job(status="starting", executor="slurm", executor_job_id="41")
    assert state_line(handed) == "job 7 starting under Slurm (job 41)"
    nodes = [{"rank": 0, "node": "n1", "gpus": "0,1"}, {"rank": 1, "node": "n2", "gpus": None}]
    running = _job(status="running", executor="slurm", executor_job_id="41", nodes=nodes)
    assert state_line(running) == "job 7 running on n1 (chief, GPUs 0,1), n2 (no GPU)"
