"""A standby runner: a runner forked by the launcher ahead of need, with a warm training
process (`worker.warm`) as its child, waiting for one builtin job.

It leads a session of its own from the start, so the warm process is in its process group
as a cold job's training process is in its runner's: cancel, time limits and GPU memory
attribution work alike. It talks to the launcher over a socket: it says
`ready WORKER_PID` once the warm process has imported everything, reads the job (the
launcher's request line), answers `taken`, and from then on is that job's runner (drops to
the owner's account, output to `output.log`, hands the job to the warm process and
supervises it as `runner` does a cold one). The end of the launcher's socket before a job
(the service stopped, or retired the pool) ends both processes. Standard library only.
"""

import json
import os
import selectors
import socket
import subprocess
import sys
import time
from typing import Any

from gpuq.contract.rundir import write_json_atomic
from worker import runner
from worker.launch_plan import launch_plan
from worker.snapshot_copy import BadSnapshot

WARM = (sys.executable, "-P", "-m", "worker.warm")
#: how far a warming process steps back for running jobs (undone when it takes a job)
WARMING_NICENESS = 10
#: capabilities(7): the right to lower a niceness again, which root in a container lacks
CAP_SYS_NICE = 23


def serve_as_standby(control: socket.socket) -> int:
    """In the launcher's forked child; its exit code."""
    os.setsid()
    runner.survive_group_signals()
    worker = subprocess.Popen(
        WARM,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=_step_back if can_step_forward() else None,
    )
    assert worker.stdin is not None and worker.stdout is not None
    if worker.stdout.readline().strip() != b"ready":
        return _end(worker, "exited while importing TensorFlow")
    try:
        control.sendall(f"ready {worker.pid}\n".encode())
        request = _wait_for_request(control, worker)
        if request is None:
            return _end(worker, None)
        control.sendall(b"taken\n")
    except OSError:  # retired meanwhile
        return _end(worker, None)
    began = time.time()
    # Closed as objects (not only by `closerange` below), so that no finaliser closes a
    # file number that a file of the job has been given since.
    control.close()
    worker.stdout.close()
    run = runner.become(request, keep=worker.stdin.fileno())
    try:
        plan: dict[str, Any] | None = launch_plan(run)
    except BadSnapshot:  # the runner's cold start says so, as the job's `never_started`
        plan = None
    if plan is None or plan["argv"][1:4] != ["-P", "-m", "worker.train"]:  # not builtin
        worker.kill()
        return runner.main(["worker.runner", str(run.path)])
    plan["warm_pid"] = worker.pid
    write_json_atomic(run.launch, plan, durable=False)
    job = {
        "run_dir": str(run.path),
        "env": dict(os.environ),
        "run_as": request.get("run_as"),
        "fence": request.get("fence"),
    }
    try:
        worker.stdin.write(json.dumps(job).encode() + b"\n")
        worker.stdin.close()
    except OSError:  # the warm process died just now: start the job cold
        print("gpuq: the warm training process was gone; starting a fresh one", flush=True)
        return runner.main(["worker.runner", str(run.path)])
    return runner.supervise(run, worker, began=began, running_at_start=False)


def can_step_forward() -> bool:
    """Whether this process may lower a niceness again: root on a host, but not root in a
    container, whose capabilities leave out CAP_SYS_NICE by default."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
    return False


def _step_back() -> None:
    """Runs in the warm process before it starts: importing TensorFlow (seconds of CPU)
    yields to the jobs that run now. Only if the step back can be undone when it takes a
    job (`can_step_forward`): a job must not run niced."""
    os.nice(WARMING_NICENESS)


def _wait_for_request(control: socket.socket, worker: "subprocess.Popen[bytes]") -> Any:
    """The launcher's request once it sends one; None if the launcher went away or the
    warm process died first."""
    assert worker.stdout is not None
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(control, selectors.EVENT_READ)
        selector.register(worker.stdout, selectors.EVENT_READ)  # readable: it died
        while b"\n" not in pending:
            for key, _ in selector.select():
                chunk = control.recv(65536) if key.fileobj is control else b""
                if not chunk:
                    return None
                pending += chunk
    return json.loads(pending.split(b"\n", 1)[0])


def _end(worker: "subprocess.Popen[bytes]", why: str | None) -> int:
    """Ends the warm process (it never got a job); the standby's exit code."""
    worker.kill()
    code = worker.wait()
    if why is None:
        return 0
    print(f"gpuq: a warm training process {why} (exit {code})", file=sys.stderr, flush=True)
    return 1
