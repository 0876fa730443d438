"""What the benchmarks share: servers on free ports, wrk runs and a printed table."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench import bare_app
from gpuq.contract.states import TERMINAL

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


@contextmanager
def serving(
    argv: list[str], port: int, ready_path: str, env: dict[str, str], cwd: Path = ROOT
) -> Iterator[str]:
    """Runs a server process until the block ends; yields its URL once `ready_path` answers."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}{ready_path}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def gpuq_server(
    *args: str,
    gpus: str = "sim:2x16GiB",
    home: Path | None = None,
    tree: Path = ROOT,
    **env: str,
) -> Iterator[str]:
    """`gpuq serve` with a fresh state directory (or `home`); yields its URL. `tree`:
    another checkout of gpuq to serve from, with this one's installed dependencies."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-") as scratch:
        environ = {
            **os.environ,
            "GPUQ_HOME": str(home or scratch),
            "GPUQ_GPUS": gpus,
            "GPUQ_PORT": str(port),
            "GPUQ_LOG_LEVEL": "WARNING",
            "GPUQ_ALLOW_ROOT_JOBS": "1",  # benchmarks may run as root, as on a one-user box
            "GPUQ_ALLOW_SHARED_ACCOUNT": "1",  # whose users are one person's tokens
            **({"PYTHONPATH": str(tree)} if tree != ROOT else {}),
            **env,
        }
        argv = [PYTHON, "-m", "service.cli.main", "serve", *args]
        with serving(argv, port, "/healthz", environ, cwd=tree) as url:
            yield url


def wait_ended(client: httpx.Client, job: dict[str, Any]) -> dict[str, Any]:
    """Long-polls `job` until it ends; returns its final state."""
    while job["status"] not in TERMINAL:
        params = {"wait_s": 30, "since": job["revision"]}
        job = client.get(f"/v1/jobs/{job['id']}", params=params).json()
    return job


@contextmanager
def bare_server() -> Iterator[str]:
    """The bare FastAPI app under the same uvicorn, log level and interpreter."""
    port = free_port()
    argv = [PYTHON, "-m", "uvicorn", "bench.bare_app:app", "--port", str(port)]
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-bare-") as scratch:
        env = {**os.environ, bare_app.DATABASE: f"{scratch}/jobs.db"}
        with serving([*argv, "--log-level", "warning"], port, "/const", env) as url:
            yield url


@dataclass
class Load:
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int


def _find(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    if found is None:
        raise RuntimeError(f"no {pattern!r} in wrk's output:\n{text}")
    return found.group(1)


def _ms(text: str) -> float:
    value, unit = _find(r"^([\d.]+)(?:us|ms|s)$", text), _find(r"(us|ms|s)$", text)
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url: str, *, connections: int, duration_s: float, script: Path | None = None) -> Load:
    """`wrk` with one thread and `connections` connections; its figures, parsed."""
    binary = shutil.which("wrk")
    if binary is None:
        raise SystemExit("wrk is missing: `make bench` installs it (scripts/ensure-command)")
    argv = [binary, "-t1", f"-c{connections}", f"-d{max(1, round(duration_s))}s", "--latency"]
    if script is not None:
        argv += ["-s", str(script)]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    rate = float(_find(r"Requests/sec:\s+([\d.]+)", out))
    p50 = _ms(_find(r"\s50%\s+(\S+)", out))
    p99 = _ms(_find(r"\s99%\s+(\S+)", out))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = int(bad.group(1)) if bad else 0
    return Load(rate, p50, p99, errors)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "-|-".join("-" * w for w in widths))
    return "\n".join("| " + line + " |" for line in lines)


def wrk_post(url: str, body: Any, *, connections: int, duration_s: float) -> Load:
    """`wrk` POSTing `body` as JSON over `connections` connections: `wrk` above, with a
    Lua script of its own."""
    with tempfile.TemporaryDirectory(prefix="gpuq-bench-wrk-") as folder:
        script = Path(folder) / "post.lua"
        script.write_text(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(json.dumps(body))}\n"
        )
        return wrk(url, connections=connections, duration_s=duration_s, script=script)


def first_job(home: Path, spec: dict[str, Any]) -> None:
    """A new database at `home/gpuq.db`, migrated, with job 1 submitted as gpuq's API
    stores one (the benchmarks then copy it in SQL to the size they want)."""
    from gpuq.contract.spec import JobSpec
    from service.runtime import open_api
    from service.settings import Settings
    from service.team.users import OPEN

    settings = Settings(home=home, gpus="sim:1", allow_root_jobs=True, allow_shared_account=True)
    service = open_api(settings)
    try:
        service.jobs.submit(JobSpec.model_validate(spec), OPEN)
    finally:
        service.close()
