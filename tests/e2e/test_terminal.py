"""`gpuq run` and `gpuq shell` in a real terminal (pexpect's pseudo-terminal), against a
real `gpuq serve` on simulated GPUs, as two members with tokens over TCP."""

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest
from websockets.exceptions import ConnectionClosed

from gpuq.http import Client
from tests.e2e.server import GPUQ, Server

pytestmark = pytest.mark.e2e

PROMPT = "READY> "


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("terminal") / "gpuq")
    srv.env["GPUQ_SOCKET"] = "-"  # members come over TCP, with tokens
    srv.env["GPUQ_CANCEL_GRACE_S"] = "5"
    srv.env["GPUQ_DATA_DIRS"] = "/"  # members may name any program and folder here
    srv.start()
    srv.tokens = {  # type: ignore[attr-defined]
        name: srv.cli("users", "add", name).strip().splitlines()[-1] for name in ("ana", "bob")
    }
    yield srv
    srv.kill()


def member(server: Server, name: str = "ana", **more: str) -> dict[str, str]:
    """The environment of a member's shell: the server's address, their token."""
    env = {k: v for k, v in server.env.items() if not k.startswith("GPUQ_")}
    return {
        **env,
        "GPUQ_URL": server.url,
        "GPUQ_TOKEN": server.tokens[name],  # type: ignore[attr-defined]
        "PS1": PROMPT,
        **more,
    }


def spawn(
    server: Server, *args: str, cwd: Path | None = None, who: str = "ana", **env: Any
) -> pexpect.spawn:
    return pexpect.spawn(
        GPUQ[0],
        [*GPUQ[1:], *args],
        env=member(server, who, **env),
        cwd=str(cwd) if cwd else None,
        encoding="utf-8",
        timeout=60,
        dimensions=(30, 111),
        logfile=sys.stdout if os.environ.get("DEBUG_PTY") else None,
    )


def ended(child: pexpect.spawn) -> int:
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus is not None, child.signalstatus
    return int(child.exitstatus)


def api(server: Server, name: str = "ana") -> httpx.Client:
    headers = {"Authorization": f"Bearer {server.tokens[name]}"}  # type: ignore[attr-defined]
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def job_id_of(child: pexpect.spawn) -> int:
    child.expect(r"gpuq: job (\d+) ")
    return int(child.match.group(1))


def test_run_takes_the_virtualenvs_python_and_this_folder_and_streams_its_output(
    server: Server, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "import os, sys, time\n"
        "time.sleep(1)\n"
        "print('python', sys.executable, flush=True)\n"
        "print('folder', os.getcwd(), flush=True)\n"
        "print('venv', os.environ.get('VIRTUAL_ENV'), 'secret', os.environ.get('SECRET'))\n"
        "print('gpus', os.environ['GPUQ_DEVICES'], flush=True)\n"
    )
    path = f"{venv / 'bin'}:{os.environ['PATH']}"
    child = spawn(
        server,
        "run",
        "--mem",
        "4G",
        "--",
        "python",
        "train.py",
        cwd=project,
        PATH=path,
        VIRTUAL_ENV=str(venv),
        SECRET="not named, so it stays here",
    )
    job_id = job_id_of(child)
    child.expect(f"gpuq: job {job_id} running on GPU [01] \\(4096 MiB\\)")
    child.expect(f"python {venv / 'bin' / 'python'}\r\n")
    child.expect(f"folder {project}\r\n")
    child.expect(f"venv {venv} secret None\r\n")
    child.expect('gpus .*"memory_limit_mb"')
    child.expect(f"gpuq: job {job_id} succeeded")
    assert ended(child) == 0
    with api(server) as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
    assert job["spec"]["kind"] == "command"
    assert job["spec"]["command"]["workdir"] == str(project)
    assert "SECRET" not in job["spec"]["command"]["env"]


@pytest.mark.parametrize(
    ("program", "code"),
    [
        ("print('fine')", 0),
        ("import sys; print('three'); sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + 15),
    ],
)
def test_run_exits_with_the_programs_code(server: Server, program: str, code: int) -> None:
    child = spawn(server, "run", "--gpus", "0", "--", "python", "-c", program)
    assert ended(child) == code


def test_ctrl_c_cancels_and_a_second_ctrl_c_leaves_at_once(server: Server) -> None:
    child = spawn(server, "run", "--gpus", "0", "--", "python", "-c", SLEEPER)
    job_id = job_id_of(child)
    child.expect("started")
    child.sendintr()
    child.expect(f"cancelling job {job_id}")
    child.expect(f"job {job_id} cancelled")
    assert ended(child) == 130

    stubborn = spawn(server, "run", "--gpus", "0", "--", "python", "-c", STUBBORN)
    job_id = job_id_of(stubborn)
    stubborn.expect("started")
    stubborn.sendintr()
    stubborn.expect(f"cancelling job {job_id}")
    stubborn.sendintr()
    stubborn.expect(f"leaving; job {job_id} is still being stopped")
    assert ended(stubborn) == 130
    with api(server) as http:
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "running"  # grace: 5 s


def test_a_foreground_run_whose_terminal_goes_away_ends_and_leaves_the_job_running(
    server: Server, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    waiter = (
        "import os, time\n"
        "print('started', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    child = spawn(server, "run", "--gpus", "0", "--", "python", "-c", waiter)
    job_id = job_id_of(child)
    child.expect("started")
    child.kill(signal.SIGHUP)  # the SSH connection drops
    child.expect(pexpect.EOF, timeout=10)
    child.close()
    with api(server) as http:
        assert http.get(f"/v1/jobs/{job_id}").json()["status"] == "running"
        go.touch()  # cancelled instead, it would end `cancelled` (grace: 5 s), not succeed
    ana = Client(server.url, server.tokens["ana"])  # type: ignore[attr-defined]
    *_, job = ana.changes(job_id, timeout_s=30)
    assert (job["status"], job["exit_code"]) == ("succeeded", 0), job


def test_run_json_prints_the_job_its_output_lines_and_the_job_at_the_end(server: Server) -> None:
    done = subprocess.run(
        [*GPUQ, "run", "--json", "--gpus", "0", "--", "python", "-c", "print('one\\ntwo')"],
        env=member(server),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    first, *lines, last = [json.loads(line) for line in done.stdout.splitlines()]
    assert first["status"] in ("queued", "starting", "running")
    assert lines == [{"job_id": first["id"], "line": "one"}, {"job_id": first["id"], "line": "two"}]
    assert (last["id"], last["status"], last["exit_code"]) == (first["id"], "succeeded", 0)


SLEEPER = "import time; print('started', flush=True); time.sleep(60)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('started', flush=True); time.sleep(60)"
)


def test_detach_prints_the_id_or_the_job_and_returns_while_the_job_runs(server: Server) -> None:
    done = subprocess.run(
        [*GPUQ, "run", "-d", "--gpus", "0", "--", "sleep", "30"],
        env=member(server),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    job_id = int(done.stdout)
    assert f"gpuq logs -f {job_id}" in done.stderr
    # With --json, the accepted job itself, as `gpuq submit --json` prints it.
    as_json = subprocess.run(
        [*GPUQ, "run", "-d", "--json", "--gpus", "0", "--", "sleep", "30"],
        env=member(server),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert as_json.returncode == 0, as_json.stderr
    job = json.loads(as_json.stdout)
    assert (job["id"], job["spec"]["command"]["argv"][-1]) == (job_id + 1, "30")
    assert job["status"] in ("queued", "starting", "running")
    with api(server) as http:
        for each in (job_id, job_id + 1):
            assert http.get(f"/v1/jobs/{each}").json()["status"] in (
                "queued",
                "starting",
                "running",
            )
            http.post(f"/v1/jobs/{each}/cancel")


def test_a_sweep_in_the_foreground_redraws_its_leaderboard_as_members_end(
    server: Server, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    (tmp_path / "train.py").write_text(
        "import os, time\n"
        "if os.environ['GPUQ_PARAM_X'] == '2':\n"
        f"    while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
    )
    child = spawn(server, "run", "--sweep", "x=1,2", "--", "python", "train.py", cwd=tmp_path)
    child.expect(r"jobs (\d+)-(\d+)")
    first, second = int(child.match.group(1)), int(child.match.group(2))
    child.expect(rf"job {first} \(x=1\) succeeded")
    # Drawn again below that line, while the other member still runs: member 1 has ended.
    child.expect("RANK")
    colour = r"(?:\x1b\[[0-9;]*m)?"  # Rich's colours around each state
    child.expect(rf"{first}\s+1\s+{colour}succeeded")
    child.expect(rf"{second}\s+2\s+{colour}running")
    go.touch()
    child.expect(rf"job {second} \(x=2\) succeeded")
    child.expect(r"sweep \d+ \(train\.py\) by ana: ended")
    rest = child.read()  # the board is not printed a second time once the sweep ended
    assert "RANK" not in rest
    assert ended(child) == 0


def test_a_bad_option_is_exit_2_naming_it_and_nothing_is_sent(server: Server) -> None:
    for args, option in [
        (["--mem", "8X"], "'--mem'"),
        (["--time", "90"], "'--time'"),
        (["--gpu-ids", "a"], "'--gpu-ids'"),
        (["--env", "CUDA_VISIBLE_DEVICES=1"], "'--env'"),
        (["--not-before", "25:00"], "'--not-before'"),
    ]:
        done = subprocess.run(
            [*GPUQ, "run", *args, "--", "true"],
            env={**member(server), "COLUMNS": "200"},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert f"Invalid value for {option}" in done.stderr, done.stderr
    with api(server) as http:
        names = [j["name"] for j in http.get("/v1/jobs").json()["jobs"]]
    assert "true" not in names


def test_a_shell_sees_its_gpu_and_cap_is_listed_and_frees_the_gpu_when_it_exits(
    server: Server,
) -> None:
    child = spawn(server, "shell", "--gpu-ids", "1", "--mem", "2G", "--env", "PS1", "--", *BASH)
    job_id = job_id_of(child)
    child.expect(PROMPT)
    child.sendline('echo "job=$GPUQ_JOB_ID plan=$GPUQ_DEVICES cols=$(tput cols)"')
    child.expect(f"job={job_id} plan=(.*) cols=111\r\n")
    plan = json.loads(child.match.group(1))
    assert plan["indices"] == [1]
    assert 0 < plan["memory_limit_mb"] < 2048  # the cap, headroom taken off
    child.expect(PROMPT)
    child.sendline("python -c 'import sitecustomize; print(sitecustomize.__file__)'")
    child.expect(r"runs/\.pythonpath/[0-9a-f]+/sitecustomize\.py")  # the cap hook is in place
    child.expect(PROMPT)
    with api(server, "bob") as http:  # anyone sees it, as a session
        listed = {j["id"]: j for j in http.get("/v1/jobs").json()["jobs"]}
        gpus = {g["index"]: g for g in http.get("/v1/gpus").json()}
    assert listed[job_id]["status"] == "running"
    assert listed[job_id]["spec"]["kind"] == "session"
    assert [a["job_id"] for a in gpus[1]["allocations"]] == [job_id]
    child.sendline("sleep 300 &")  # left behind: ended with the session
    child.expect(PROMPT)
    child.sendline("exit 4")
    exited = time.monotonic()  # a little before the shell has: the time below is the most
    with api(server) as http:
        while held := {g["index"]: g for g in http.get("/v1/gpus").json()}[1]["allocations"]:
            assert time.monotonic() - exited <= 1.0, f"GPU 1 still held a second on: {held}"
            time.sleep(0.05)
    child.expect(f"job {job_id} failed")
    assert ended(child) == 4
    with api(server) as http:
        gpus = {g["index"]: g for g in http.get("/v1/gpus").json()}
    assert gpus[1]["allocations"] == []  # free once `gpuq shell` has returned
    assert not _processes_of(job_id, server)


BASH = ["/bin/bash", "--norc", "--noprofile"]


def _processes_of(job_id: int, server: Server) -> list[str]:
    """Processes still working in the session's folder."""
    folder = str(server.home / "runs" / str(job_id) / "1")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(folder):
                found.append(pid)
        except OSError:
            continue
    return found


def test_a_session_ends_at_its_time_limit(server: Server) -> None:
    child = spawn(server, "shell", "--gpus", "0", "--time", "2s", "--env", "PS1", "--", *BASH)
    job_id = job_id_of(child)
    child.expect(PROMPT)
    child.expect(f"job {job_id} timed_out")
    assert ended(child) == 124


def test_a_second_members_session_waits_for_the_gpu_the_first_holds(server: Server) -> None:
    first = spawn(server, "shell", "--gpu-ids", "0", "--env", "PS1", "--", *BASH)
    first_id = job_id_of(first)
    first.expect(PROMPT)
    second = spawn(server, "shell", "--gpu-ids", "0", "--env", "PS1", "--", *BASH, who="bob")
    second_id = job_id_of(second)
    second.expect(
        f"queued: 1st in line, waiting for GPUs 0 whole; GPU 0 is held whole by job {first_id}"
    )
    time.sleep(1)
    assert second.isalive()
    first.sendline("exit")
    assert ended(first) == 0
    second.expect(f"job {second_id} running on GPU 0")
    second.expect(PROMPT)
    second.sendline("exit 0")
    assert ended(second) == 0


def test_a_session_whose_terminal_goes_away_ends(server: Server) -> None:
    child = spawn(server, "shell", "--gpus", "0", "--env", "PS1", "--", *BASH)
    job_id = job_id_of(child)
    child.expect(PROMPT)
    child.kill(9)  # the terminal's client is gone without a word
    child.close()
    with api(server) as http:
        deadline = time.monotonic() + 30
        while (job := http.get(f"/v1/jobs/{job_id}").json())["status"] == "running":
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
    assert (job["status"], job["reason"]) == ("cancelled", "terminal_closed")


def test_only_its_owner_attaches_to_a_session(server: Server) -> None:
    child = spawn(server, "shell", "--gpus", "0", "--env", "PS1", "--", *BASH)
    job_id = job_id_of(child)
    child.expect(PROMPT)
    bob = Client(server.url, server.tokens["bob"])  # type: ignore[attr-defined]
    with bob.terminal(job_id) as connection, pytest.raises(ConnectionClosed):
        connection.recv(timeout=10)
    close = connection.protocol.close_rcvd
    assert close is not None
    assert (close.code, close.reason) == (
        4403,
        f"job {job_id} is ana's session: only its owner attaches to it",
    )
    child.sendline("exit")
    assert ended(child) == 0


def test_a_queued_session_whose_terminal_goes_away_is_cancelled(server: Server) -> None:
    holder = spawn(server, "shell", "--gpu-ids", "0", "--env", "PS1", "--", *BASH)
    holder.expect(PROMPT)
    waiting = spawn(server, "shell", "--gpu-ids", "0", "--env", "PS1", "--", *BASH)
    job_id = job_id_of(waiting)
    waiting.expect("queued: 1st in line")
    waiting.kill(signal.SIGHUP)  # the SSH connection drops while it waits
    waiting.close()
    with api(server) as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
    assert (job["status"], job["reason"]) == ("cancelled", "cancelled_by_user")
    holder.sendline("exit")
    assert ended(holder) == 0
