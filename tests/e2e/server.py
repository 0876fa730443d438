"""`gpuq serve` as a real process on a free port, and the `gpuq` CLI against it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

GPUQ = [sys.executable, "-m", "service.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(
        self,
        home: Path,
        database_url: str | None = None,
        gpuq: Sequence[str] = GPUQ,
        cwd: Path | None = None,
    ) -> None:
        """`database_url`: None for SQLite in `home`; `gpuq`: the command that runs gpuq's
        CLI (another installation's `bin/gpuq`), in `cwd`."""
        self.home = home
        self.gpuq = list(gpuq)
        self.cwd = cwd
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db_url = database_url or f"sqlite:///{home / 'gpuq.db'}"
        self.env = {
            **os.environ,
            "GPUQ_HOME": str(home),
            "GPUQ_DATABASE_URL": self.db_url,
            "GPUQ_GPUS": "sim:2x8GiB",
            "GPUQ_PORT": str(self.port),
            "GPUQ_URL": self.url,
            "GPUQ_ALLOW_ROOT_JOBS": "1",  # the suite runs as root, as on a single-user box
            "GPUQ_ALLOW_SHARED_ACCOUNT": "1",  # whose users are one person's tokens
            "GPUQ_WARM_WORKERS": "0",  # tests/e2e/test_warm_workers.py asks for them
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, new_session: bool = False) -> None:
        """`new_session`: gpuq serve leads a session with no terminal, as under systemd."""
        with open(self.home.parent / "serve.log", "ab") as log:
            self.proc = subprocess.Popen(
                [*self.gpuq, "serve", *args],
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("gpuq serve did not come up")

    def kill(self, sig: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [*self.gpuq, *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def job(self, job_id: int) -> dict:
        return json.loads(self.cli("show", str(job_id), "--json"))

    def wait(self, job_id: int, statuses: set[str], timeout_s: float = 90) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["status"] in statuses:
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} never reached {statuses}: {job}")
