"""`make gpu-check`'s two halves that can run without a GPU: the wheels prepared for a box
with no network are complete, and the run stops at once, cleanly, where there is no GPU."""

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.server import free_port

#: the GPU acceptance run: gpuq serve and real jobs: `make test` runs it, `make check` does not
pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
ENDED = {"succeeded", "failed", "cancelled", "timed_out"}


def gpu_check(*, wheels: Path) -> subprocess.CompletedProcess:
    """scripts/gpu-check run as on a box without gpuq installed, its wheels from `wheels`."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu-check"), "--wheels", str(wheels)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
    )


def test_without_a_gpu_it_says_so_and_leaves_nothing_running(tmp_path):
    done = gpu_check(wheels=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("gpu-check: no NVIDIA GPU: ")
    assert "starting gpuq serve" not in done.stdout


def test_wheels_made_for_another_python_are_refused_before_anything_is_installed(tmp_path):
    """`make gpu-wheels` makes them for the GPU box's Python (3.12 unless told); a folder
    of them left in a checkout for another Python is named, not half installed."""
    other = f"cp{sys.version_info[0]}{sys.version_info[1] + 1}"
    (tmp_path / f"pyyaml-6.0.3-{other}-{other}-manylinux_2_17_x86_64.whl").touch()
    (tmp_path / "shellingham-1.5.4-py2.py3-none-any.whl").touch()
    done = gpu_check(wheels=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "wheels for another Python" in done.stderr
    assert f"pyyaml-6.0.3-{other}" in done.stderr
    assert "shellingham" not in done.stderr
    assert "installing" not in done.stdout


#: A command job's program: where it imports from.
PYTHONPATH = "import os; print(os.environ['PYTHONPATH'])"


def test_the_wheels_run_gpuq_serve_and_its_jobs_in_a_bare_interpreter(tmp_path):
    """As on a GPU box without network: gpuq and its dependencies on PYTHONPATH alone, not
    installed. Its runners import gpuq from there too; the job's program gets the hook's
    folder, not gpuq's dependencies."""
    wheels, site, bare = tmp_path / "whl", tmp_path / "site", tmp_path / "bare"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    gpu_wheels = [sys.executable, str(ROOT / "scripts" / "gpu-wheels")]
    subprocess.run([*gpu_wheels, "--python-version", version, "--dest", str(wheels)], check=True)
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*install, "--target", str(site), *map(str, wheels.glob("*.whl"))], check=True)
    # A virtualenv without pip or packages: only the wheels and the checkout.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    port = free_port()
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{site}:{ROOT}",
        "GPUQ_HOME": str(tmp_path / "home"),
        "GPUQ_GPUS": "sim:1",
        "GPUQ_PORT": str(port),
        "GPUQ_ALLOW_ROOT_JOBS": "1",  # this suite runs as root in CI
    }
    gpuq = [str(bare / "bin" / "python"), "-m", "service.cli.main"]
    added = subprocess.run([*gpuq, "users", "add", "ana"], env=env, capture_output=True, text=True)
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip().splitlines()[-1]
    server = subprocess.Popen([*gpuq, "serve"], env=env, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, "gpuq serve exited"
            assert time.monotonic() < deadline, "gpuq serve did not come up"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}
        )
        gpus = api.get("/v1/gpus")
        assert gpus.status_code == 200 and gpus.json()[0]["simulated"]
        argv = [str(bare / "bin" / "python"), "-c", PYTHONPATH]
        submitted = api.post("/v1/jobs", json={"kind": "command", "command": {"argv": argv}})
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        deadline = time.monotonic() + 60
        while (job := api.get(f"/v1/jobs/{job_id}").json())["status"] not in ENDED:
            assert time.monotonic() < deadline, job
            time.sleep(0.2)
        log = api.get(f"/v1/jobs/{job_id}/logs").text
        assert job["status"] == "succeeded", (job, log)
        folders = log.strip().splitlines()[-1].split(":")
        assert len(folders) == 1 and (Path(folders[0]) / "sitecustomize.py").is_file(), log
    finally:
        server.terminate()
        server.wait(timeout=30)
