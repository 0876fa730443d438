"""gpuq's container image, built and run for real: a Docker daemon of our own, a Debian
base image standing in for `python:3.11-slim` (no registry is reachable here), gpuq's
`Dockerfile` with the `cpu` extra and its packages from a local mirror, then the steps of
docs/operators/container.md: add the first user, start it, a job, a restart, jobs as their
owners' accounts.
About 4 minutes on 2 cores, most of it installing TensorFlow into the image."""

import functools
import http.server
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from alembic.script import ScriptDirectory

from service.store import migrate
from tests.conftest import job_spec
from tests.deploy.conftest import REPO
from tests.deploy.dockerd import DockerDaemon
from tests.e2e.server import free_port

pytestmark = pytest.mark.e2e

BASE = "gpuq-test-base:debian"
IMAGE = "gpuq:test"
SCHEMA_VERSION = (
    "import sqlite3; db = sqlite3.connect('/var/lib/gpuq/gpuq.db'); "
    "print(db.execute('SELECT version_num FROM alembic_version').fetchone()[0])"
)
#: a stranger's account on the host, which the container learns from the mounted files
OWNER_UID = 4242


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    daemon = DockerDaemon(tmp_path_factory.mktemp("dockerd"))
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def package_mirror(wheelhouse: Path) -> Iterator[str]:
    """The wheelhouse served on loopback, as a team's package mirror would be."""
    handler = functools.partial(QuietFiles, directory=str(wheelhouse))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def image(docker: DockerDaemon, package_mirror: str, tmp_path_factory) -> str:
    docker.import_debian(BASE, tmp_path_factory.mktemp("rootfs") / "root")
    build_args = {
        "BASE": BASE,
        "EXTRA": "cpu",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": package_mirror,
    }
    args = [f"--build-arg={k}={v}" for k, v in build_args.items()]
    docker.run("build", "--network=host", *args, f"--tag={IMAGE}", str(REPO), timeout=1200)
    return IMAGE


class Container:
    """gpuq's image running as `docker run` would start it, on loopback of this host."""

    def __init__(self, docker: DockerDaemon, volume: str, *options: str) -> None:
        self.docker = docker
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.volume = ["--volume", f"{volume}:/var/lib/gpuq", *options]
        self.name = f"gpuq-{self.port}"
        self.token = ""

    def gpuq(self, *args: str) -> str:
        """A `gpuq` command in a throwaway container on the same state (`users add`...)."""
        return self.docker.run("run", "--rm", *self.volume, IMAGE, "gpuq", *args).stdout

    def start(self, *env: str) -> None:
        self.docker.run(
            "run",
            "--detach",
            f"--name={self.name}",
            "--network=host",  # with GPUQ_HOST=127.0.0.1: served on loopback only
            "--pid=host",  # as docker-compose.yml has it
            "--health-interval=1s",  # the image's HEALTHCHECK, asked more often
            *[f"--env={e}" for e in ("GPUQ_HOST=127.0.0.1", f"GPUQ_PORT={self.port}", *env)],
            *self.volume,
            IMAGE,
        )

    def healthy(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            health = self.inspect()["State"].get("Health") or {}
            if health.get("Status") == "healthy":
                return
            time.sleep(0.5)
        raise AssertionError(f"never healthy: {self.inspect()['State']}\n{self.logs()}")

    def inspect(self) -> dict:
        return json.loads(self.docker.run("inspect", self.name).stdout)[0]

    def logs(self) -> str:
        done = self.docker.run("logs", self.name, check=False)
        return done.stdout + done.stderr

    def exec(self, *argv: str) -> str:
        return self.docker.run("exec", self.name, *argv).stdout

    def api(self, method: str, path: str, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, self.url + path, headers=headers, timeout=30, **kwargs)

    def wait(self, job_id: int, timeout_s: float = 180) -> dict:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = self.api("GET", f"/v1/jobs/{job_id}").json()
            if job["status"] in {"succeeded", "failed", "cancelled", "timed_out"}:
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not end: {job}\n{self.logs()}")

    def remove(self) -> None:
        self.docker.run("rm", "--force", self.name, check=False)


def test_the_image_holds_gpuq_and_its_state_volume_but_no_build_leftovers(docker, image):
    config = json.loads(docker.run("inspect", image).stdout)[0]["Config"]
    assert config["Healthcheck"]["Test"] == ["CMD", "python3", "-P", "-m", "service.healthcheck"]
    assert config["Cmd"] == ["gpuq", "serve"]
    assert config["User"] == "root"
    assert "/var/lib/gpuq" in config["Volumes"]
    assert "GPUQ_HOME=/var/lib/gpuq" in config["Env"]
    look = (
        "for c in gcc cc g++ make; do command -v $c; done; "
        "ls -d /root/.cache /src /opt/gpuq/src 2>/dev/null; "
        "find /opt /root /tmp \\( -name '*.whl' -o -name '.git' -o -name '.venv' \\) -print; "
        "python3 -c 'import worker.launch_plan as p; print(p.HOOK.is_file())'"
    )
    found = docker.run("run", "--rm", image, "sh", "-c", look).stdout.split()
    assert found == ["True"], f"left in the image (or the hook missing): {found}"


def test_first_user_then_serve_a_job_and_a_restart_keeps_everything(docker, image):
    docker.run("volume", "create", "gpuq-state")
    container = Container(docker, "gpuq-state")
    try:
        added = container.gpuq("users", "add", "ana", "--admin")
        container.token = added.strip().splitlines()[-1]
        assert container.token.startswith("gpuq_"), added
        container.start()
        container.healthy()  # Docker ran the image's HEALTHCHECK: /healthz answered 200
        health = httpx.get(f"{container.url}/healthz").json()
        assert health["status"] == "ok" and health["simulated_gpus"], health
        assert httpx.get(f"{container.url}/v1/jobs").status_code == 401  # a token is needed
        head = ScriptDirectory.from_config(migrate.alembic_config()).get_current_head()
        assert container.exec("python3", "-c", SCHEMA_VERSION).strip() == head  # migrated

        # Builtin jobs take a warm training process: wait for one, so the job uses it.
        deadline = time.monotonic() + 120
        while 'gpuq_warm_workers{state="ready"} 1.0' not in container.api("GET", "/metrics").text:
            assert time.monotonic() < deadline, container.logs()
            time.sleep(0.5)
        job = container.api("POST", "/v1/jobs", json=job_spec()).json()
        done = container.wait(job["id"])
        assert done["status"] == "succeeded", (done, container.logs())
        launch = json.loads(container.exec("cat", "/var/lib/gpuq/runs/1/1/launch.json"))
        assert launch["warm_pid"], launch  # root in a container has no CAP_SYS_NICE: still ok
        model = container.api("GET", "/v1/jobs/1/artifacts/model.keras")
        assert model.status_code == 200 and model.content[:2] == b"PK"  # a .keras zip

        docker.run("restart", container.name, timeout=60)
        container.healthy()
        again = container.api("GET", "/v1/jobs/1")
        assert again.status_code == 200 and again.json()["status"] == "succeeded"
        assert container.api("GET", "/v1/jobs/1/artifacts/model.keras").content == model.content
        second = container.api("POST", "/v1/jobs", json=job_spec(name="after-restart")).json()
        assert container.wait(second["id"])["status"] == "succeeded", container.logs()
    finally:
        container.remove()


def test_jobs_run_as_their_owners_accounts_in_the_container(docker, image, tmp_path):
    """GPUQ_RUN_AS=owner with the host's account files mounted read-only: why the image
    runs gpuq as root."""
    accounts = tmp_path / "etc"
    accounts.mkdir()
    for name, entry in (("passwd", "bo:x:{0}:{0}:Bo:/home/bo:/bin/sh"), ("group", "bo:x:{0}:")):
        base = docker.run("run", "--rm", image, "cat", f"/etc/{name}").stdout
        (accounts / name).write_text(base + entry.format(OWNER_UID) + "\n")
    mounts = [f"--volume={accounts / n}:/etc/{n}:ro" for n in ("passwd", "group")]
    docker.run("volume", "create", "gpuq-owners")
    container = Container(docker, "gpuq-owners", *mounts)
    try:
        container.token = container.gpuq("users", "add", "bo", "--unix-user", "bo").split()[-1]
        container.start("GPUQ_RUN_AS=owner")
        container.healthy()
        spec = {"name": "whoami", "kind": "command", "command": {"argv": ["id", "-u"]}}
        job = container.api("POST", "/v1/jobs", json=spec)
        assert job.status_code == 201, job.text
        done = container.wait(job.json()["id"])
        assert done["status"] == "succeeded", (done, container.logs())
        log = container.api("GET", f"/v1/jobs/{done['id']}/logs").text
        assert log.split() == [str(OWNER_UID)], log
        owner = container.exec("stat", "-c", "%u", "/var/lib/gpuq/runs/1/1/output.log")
        assert owner.strip() == str(OWNER_UID)
    finally:
        container.remove()


def test_the_compose_file_validates_with_gpus_host_pids_and_a_gated_postgres_profile():
    compose = shutil.which("docker-compose")
    assert compose, "docker-compose is missing: `make test` installs Debian's docker-compose"
    done = subprocess.run(
        [compose, "--profile", "postgres", "config"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert set(services) == {"gpuq", "gpuq-pg", "postgres"}
    for name in ("gpuq", "gpuq-pg"):
        service = services[name]
        assert service["pid"] == "host"
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
        assert any(v.endswith(":/var/lib/gpuq:rw") for v in service["volumes"])
    assert services["gpuq-pg"]["profiles"] == ["postgres"] == services["postgres"]["profiles"]
    assert services["gpuq-pg"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["gpuq-pg"]["environment"]["GPUQ_DATABASE_URL"].startswith(
        "postgresql+psycopg://gpuq:"
    )
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
