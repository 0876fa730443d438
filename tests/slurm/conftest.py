"""A real Slurm cluster for the session: scripts/slurm-cluster, on loopback.

Two nodes on this host (two slurmd's), each with GPUS fake GPUs: partition `gpu` (the
default) is the first node alone, so a job that names no partition sees one node of GPUS
GPUs; partition `multi` is both nodes, for jobs over two nodes.

`slurm_cluster` starts it once (about a second) and always stops it at the session's end.
Client commands (sbatch, squeue, scontrol, scancel, sinfo) need `cluster.env` on top of
`os.environ`: `cluster.run(...)` does that, `cluster.client_env()` gives the whole mapping.
"""

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm-cluster"
GPUS = 4
NODES = ("gpuq-n1", "gpuq-n2")
#: The first node: partition PARTITION's only one.
NODE = NODES[0]
PARTITION = "gpu"
#: Every node in NODES.
MULTI_PARTITION = "multi"
#: The script itself gives up after 60 s of waiting for the nodes.
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 60


@dataclass(frozen=True)
class SlurmCluster:
    dir: Path
    #: What a client command needs on top of os.environ (SLURM_CONF).
    env: dict[str, str]
    #: Fake GPUs per node.
    gpus: int
    #: The default partition: `node` alone.
    partition: str
    #: The first node, `partition`'s only one.
    node: str
    #: Every node, `node` first.
    nodes: tuple[str, ...]
    #: The partition of every node, for jobs over several nodes.
    multi_partition: str

    def client_env(self) -> dict[str, str]:
        return {**os.environ, **self.env}

    def run(
        self, *args: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster; `check`: fail on a nonzero exit."""
        done = subprocess.run(
            args, env=self.client_env(), capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {done.returncode}\n{done.stdout}{done.stderr}"
            )
        return done

    def show_job(self, job_id: int | str) -> dict[str, str]:
        """`scontrol show job ID --oneliner` as a mapping (Key=Value words)."""
        out = self.run("scontrol", "show", "job", str(job_id), "--oneliner").stdout
        return dict(word.split("=", 1) for word in out.split() if "=" in word)

    def log_tails(self, lines: int = 30) -> str:
        """The end of munged's, slurmctld's and each slurmd's logs, for failure messages."""
        out = []
        for log in sorted((self.dir / "log").glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"---- {log}\n" + "\n".join(tail))
        return "\n".join(out)


def read_env(path: Path) -> dict[str, str]:
    """`export NAME=VALUE` lines (DIR/env) as a mapping."""
    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line.removeprefix("export ").split("=", 1)
            env[name] = value
    return env


def _stop(directory: Path) -> str:
    """Stops the cluster in `directory`; what `stop` said when it failed, else ''."""
    try:
        done = subprocess.run(
            [str(SCRIPT), "stop", str(directory)],
            capture_output=True,
            text=True,
            timeout=STOP_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"scripts/slurm-cluster stop {directory} took over {STOP_TIMEOUT_S}s"
    if done.returncode != 0:
        return f"scripts/slurm-cluster stop exited {done.returncode}: {done.stdout}{done.stderr}"
    return ""


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster runs slurmctld and slurmd as root")
    directory = tmp_path_factory.mktemp("slurm")
    cluster = SlurmCluster(directory, {}, GPUS, PARTITION, NODE, NODES, MULTI_PARTITION)
    command = [str(SCRIPT), "start", str(directory), "--gpus", str(GPUS)]
    try:
        try:
            started = subprocess.run(
                command, capture_output=True, text=True, timeout=START_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as timed_out:
            raw: bytes | str | None = timed_out.stderr
            said = raw.decode(errors="replace") if isinstance(raw, bytes) else raw or ""
            raise RuntimeError(
                f"{' '.join(command)} took over {START_TIMEOUT_S}s\n{said}\n" + cluster.log_tails()
            ) from None
        if started.returncode != 0:
            # The script printed its logs' tails and stopped what it had started.
            raise RuntimeError(
                f"{' '.join(command)} exited {started.returncode}\n{started.stdout}{started.stderr}"
            )
        env = read_env(directory / "env")
        assert env.get("SLURM_CONF") == str(directory / "etc" / "slurm.conf"), env
        yield SlurmCluster(directory, env, GPUS, PARTITION, NODE, NODES, MULTI_PARTITION)
    except BaseException:
        _stop(directory)  # a failed start, or the generator closed early (GeneratorExit)
        raise
    problem = _stop(directory)
    if problem:
        raise RuntimeError(problem)


T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 15) -> T:
    """Polls `probe` every 0.1 s until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)
