"""A hung step (an all-reduce that never completes) ends the builtin trainer, armed only
once a first batch has finished."""

import json
import subprocess
import sys
import textwrap

from gpuq.contract.exits import ExitCode

HANG = textwrap.dedent(
    """
    import sys, time
    from gpuq.contract.events import EventWriter
    from worker.step_watchdog import StepWatchdog

    dog = StepWatchdog(0.5, EventWriter(sys.argv[1]))
    dog.on_train_begin()
    time.sleep(1.5)  # the first step (tracing, compiling) may take its time
    print("first step done", flush=True)
    dog.on_train_batch_end(0)
    time.sleep(1.0 if sys.argv[2] == "hang" else 0.2)
    dog.on_train_batch_end(1)
    dog.on_train_end()
    print("trained", flush=True)
    """
)


def run(tmp_path, how: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    events = tmp_path / "events.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", HANG, str(events), how],
        capture_output=True,
        text=True,
        timeout=120,
        env={"CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": "/usr/bin:/bin"},
    )
    lines = events.read_text().splitlines() if events.exists() else []
    return done, [json.loads(line) for line in lines]


def test_a_step_that_hangs_ends_the_process_with_its_own_exit_code(tmp_path):
    done, events = run(tmp_path, "hang")
    assert done.returncode == ExitCode.step_timeout, done.stderr
    assert "first step done" in done.stdout and "trained" not in done.stdout
    assert [e["event"] for e in events] == ["failed"]
    assert "did not finish in 0.5 s (a hung all-reduce?)" in events[0]["message"]


def test_steps_that_keep_coming_never_trip_it(tmp_path):
    done, events = run(tmp_path, "steady")
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout and events == []
