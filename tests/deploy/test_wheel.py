"""gpuq as a user installs it: `python -m build` makes an sdist and, from it, a wheel that
hold every file of gpuq's packages; the wheel installs offline into a fresh virtualenv outside
the checkout, and that `gpuq serve` migrates an empty home, serves the dashboard, trains a
builtin job on a warm worker and runs a `command` job under gpuq's start-up hook."""

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from alembic.script import ScriptDirectory

from service.store import migrate
from tests.conftest import command_spec, job_spec
from tests.deploy.conftest import REPO
from tests.e2e.server import Server

pytestmark = pytest.mark.e2e

HOOK = "worker/hook/sitecustomize.py"
DASHBOARD = "service/api/static/dashboard.html"
#: The checkout's folders that install, and where: the migrations as the service's.
INSTALLED = {
    "gpuq/": "gpuq/",
    "service/": "service/",
    "worker/": "worker/",
    "migrations/": "service/migrations/",
}
#: What gpuq finds by path, not by import (as installed): a wheel without one still imports.
LOADED = (
    HOOK,
    DASHBOARD,
    "service/migrations/env.py",
    "service/migrations/script.py.mako",
)
MIGRATIONS = "service/migrations/versions/"
#: What would put another gpuq (the checkout's) before the installed one.
NOT_INHERITED = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
ENDED = {"succeeded", "failed", "cancelled", "timed_out"}
#: Importing TensorFlow takes seconds, more on a busy 2-core box.
JOB_S = 240


def run(argv: list[str], timeout_s: float, **options: Any) -> float:
    """Runs `argv`, failing with its output unless it succeeds; the seconds it took."""
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, **options)
    output = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{output}"
    return time.monotonic() - start


def checkout_files() -> list[str]:
    """The checkout's files, as git sees them: tracked, or new and not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    )
    names = listed.stdout.decode().split("\0")
    return sorted({n for n in names if n and (REPO / n).is_file()})


def installed_name(name: str) -> str | None:
    """Where the checkout's file `name` goes in the wheel; None if it does not install."""
    for folder, target in INSTALLED.items():
        if name.startswith(folder):
            return target + name.removeprefix(folder)
    return None


def outside_checkout(venv: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` for programs of `venv`, with nothing that leads to the checkout."""
    clean = {k: v for k, v in env.items() if k not in NOT_INHERITED}
    path = clean.get("PATH", os.defpath).split(os.pathsep)
    path = [p for p in path if p and not Path(p).resolve().is_relative_to(REPO)]
    clean["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    return clean


@dataclass
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dist(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """`python -m build` in a copy of the checkout: the sdist, then the wheel built from
    the sdist (so the wheel has only what the sdist has). Offline: the isolated build
    environment's setuptools comes from the wheelhouse."""
    source = tmp_path_factory.mktemp("source")
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}
    took = run([sys.executable, "-m", "build", "--outdir", str(out), str(source)], 600, env=env)
    print(f"wheel test: python -m build {took:.1f} s")
    sdists, wheels = sorted(out.glob("*.tar.gz")), sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return Dist(sdists[0], wheels[0])


@pytest.fixture(scope="module")
def venv(dist: Dist, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv outside the checkout with the wheel and its `cpu` extra, installed
    from the wheelhouse alone."""
    venv = tmp_path_factory.mktemp("venv")
    assert not venv.resolve().is_relative_to(REPO), "pytest's temporary folder is in the checkout"
    run([sys.executable, "-m", "venv", str(venv)], 120)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index"]
    pip += ["--find-links", str(wheelhouse), f"{dist.wheel}[cpu]"]
    took = run(pip, 900, env=outside_checkout(venv, os.environ), cwd=venv)
    print(f"wheel test: pip install {dist.wheel.name}[cpu] {took:.1f} s")
    return venv


@pytest.fixture(scope="module")
def served(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The venv's `gpuq serve` in a folder of its own, on simulated GPUs, with a warm
    worker (which imports `worker.warm` from the wheel too)."""
    root = tmp_path_factory.mktemp("served")
    server = Server(root / "gpuq", gpuq=[str(venv / "bin" / "gpuq")], cwd=root)
    server.env = {**outside_checkout(venv, server.env), "GPUQ_WARM_WORKERS": "1"}
    assert not server.home.exists()  # so the migrations run from the first
    try:
        try:
            server.start()
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{serve_log(server)}") from None
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            try:
                server.kill()
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(timeout=30)


def serve_log(server: Server) -> str:
    return (server.home.parent / "serve.log").read_text(errors="replace")[-6000:]


def finished(server: Server, spec: dict[str, Any]) -> dict[str, Any]:
    """Submits `spec` and waits until the job has ended."""
    response = httpx.post(f"{server.url}/v1/jobs", json=spec, timeout=30)
    assert response.status_code == 201, response.text
    start = time.monotonic()
    job = server.wait(response.json()["id"], ENDED, timeout_s=JOB_S)
    print(f"wheel test: job {spec['name']!r} {job['status']} in {time.monotonic() - start:.1f} s")
    return job


def run_dir(server: Server, job: dict[str, Any]) -> Path:
    return server.home / "runs" / str(job["id"]) / str(job["attempt"])


def test_the_sdist_and_the_wheel_hold_every_file_of_the_packages(dist):
    sources = {n for n in checkout_files() if installed_name(n)}
    expected = {installed_name(n) for n in sources}
    assert set(LOADED) <= expected and any(n.startswith(MIGRATIONS) for n in expected)
    with zipfile.ZipFile(dist.wheel) as wheel:
        in_wheel = set(wheel.namelist())
    with tarfile.open(dist.sdist) as sdist:
        in_sdist = {n.split("/", 1)[-1] for n in sdist.getnames()}
    missing = sorted(expected - in_wheel)
    assert not missing, f"{dist.wheel.name} lacks {missing}"
    missing = sorted(sources - in_sdist)
    assert not missing, f"{dist.sdist.name} lacks {missing}"
    assert not sorted(n for n in in_sdist if n.startswith("tests/")), "tests in the sdist"
    # Nothing else installs: no tests, no caches.
    extra = sorted(n for n in in_wheel - expected if not n.split("/")[0].endswith(".dist-info"))
    assert not extra, f"{dist.wheel.name} has files gpuq does not: {extra}"


def test_the_venv_imports_the_wheels_packages_not_the_checkouts(venv, tmp_path):
    code = (
        "import json, sys, gpuq, service.migrations, worker.runner; print(json.dumps("
        "[[gpuq.__file__, service.migrations.__file__, worker.runner.__file__], sys.path]))"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        env=outside_checkout(venv, os.environ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found, path = json.loads(done.stdout)
    assert all(Path(where).is_relative_to(venv) for where in found), found
    assert [p for p in path if p and Path(p).resolve().is_relative_to(REPO)] == []


def test_the_installed_service_migrates_an_empty_home_and_serves_the_dashboard(served):
    assert httpx.get(f"{served.url}/healthz").status_code == 200
    head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
    with contextlib.closing(sqlite3.connect(served.home / "gpuq.db")) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
    page = httpx.get(f"{served.url}/")
    assert page.status_code == 200
    assert page.text == (REPO / DASHBOARD).read_text()


def test_the_installed_service_trains_a_builtin_job_on_a_warm_worker(served):
    deadline = time.monotonic() + JOB_S
    while 'gpuq_warm_workers{state="ready"} 1.0' not in httpx.get(f"{served.url}/metrics").text:
        assert time.monotonic() < deadline, f"no warm worker got ready:\n{serve_log(served)}"
        time.sleep(0.5)
    job = finished(served, job_spec(name="from-the-wheel"))
    assert job["status"] == "succeeded", job
    assert json.loads((run_dir(served, job) / "launch.json").read_text())["warm_pid"]
    listed = httpx.get(f"{served.url}/v1/jobs/{job['id']}/artifacts").json()["artifacts"]
    assert "model.keras" in [a["name"] for a in listed]


#: What the start-up hook leaves in a program: itself as `sitecustomize`, its environment
#: for a simulated GPU (JAX kept on the CPU) and its import hook armed for TensorFlow.
SHOW_HOOK = (
    "import json, os, sys, gpuq; print('HOOK=' + json.dumps({"
    "'sitecustomize': sys.modules['sitecustomize'].__file__, "
    "'gpuq': os.path.realpath(gpuq.__file__), "
    "'JAX_PLATFORMS': os.environ.get('JAX_PLATFORMS'), "
    "'meta_path': [type(finder).__name__ for finder in sys.meta_path]}))"
)


def test_a_command_job_runs_under_the_installed_start_up_hook(served, venv):
    spec = command_spec(SHOW_HOOK)
    spec["command"]["argv"][0] = str(venv / "bin" / "python")
    job = finished(served, spec)
    log = httpx.get(f"{served.url}/v1/jobs/{job['id']}/logs").text
    assert job["status"] == "succeeded", (job, log)
    shown = json.loads(log.split("HOOK=", 1)[1])
    hook = Path(shown["sitecustomize"])  # in the folder the launcher keeps for its runners
    assert hook.parent.parent.resolve() == (served.home / "runs" / ".pythonpath").resolve()
    assert hook.read_text() == (REPO / HOOK).read_text()
    assert Path(shown["gpuq"]).is_relative_to(venv.resolve())
    assert shown["JAX_PLATFORMS"] == "cpu"
    assert "_SetUpOnImport" in shown["meta_path"]
