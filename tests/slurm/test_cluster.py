"""The test cluster does what the Slurm executor will ask of Slurm 22.05, command by command.

Each test submits its own small jobs (named gpuq-...) and waits for them to end; only the
GPU tests ask for GPUs, so the others never wait on them.
"""

import re
import time
from pathlib import Path

from tests.slurm.conftest import SlurmCluster, wait_for

#: squeue's --format for one job a line: id, name, long state (PENDING, RUNNING, COMPLETING,
#: COMPLETED, CANCELLED, FAILED, TIMEOUT...), reason (None, Resources, Priority, Dependency,
#: JobHeldUser, JobHeldAdmin, DependencyNeverSatisfied, NonZeroExitCode...).
SQUEUE_FORMAT = "%i|%j|%T|%r"
#: Well above the second or so a job takes to start.
START_S = 10
#: A cancelled job is COMPLETING for up to KillWait (5 s) and then some.
END_S = 20


def script(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/bash\nset -u\n" + body)
    path.chmod(0o755)
    return path


def submit(cluster: SlurmCluster, path: Path, *options: str) -> int:
    """`sbatch --parsable`: the job id (the output is `ID`, or `ID;CLUSTER` with -M)."""
    out = cluster.run("sbatch", "--parsable", *options, str(path)).stdout.strip()
    assert re.fullmatch(r"\d+(;\S+)?", out), out
    return int(out.split(";")[0])


def row(cluster: SlurmCluster, job_id: int) -> tuple[str, str, str, str] | None:
    """squeue's line for the job (any state), or None once Slurm has forgotten it."""
    done = cluster.run(
        "squeue",
        "--noheader",
        "--states=all",
        f"--jobs={job_id}",
        f"--format={SQUEUE_FORMAT}",
        check=False,
    )
    if done.returncode != 0:
        assert "Invalid job id specified" in done.stderr, done.stderr
        return None
    lines = done.stdout.splitlines()
    if not lines:
        return None
    assert len(lines) == 1, lines
    job, name, state, reason = lines[0].split("|")
    assert job == str(job_id), lines
    return job, name, state, reason


def state(cluster: SlurmCluster, job_id: int) -> tuple[str, str]:
    """(state, reason) from squeue."""
    found = row(cluster, job_id)
    assert found is not None, f"job {job_id} is unknown to squeue"
    return found[2], found[3]


def wait_state(
    cluster: SlurmCluster, job_id: int, states: set[str], timeout_s: float = START_S
) -> tuple[str, str]:
    def probe() -> tuple[str, str] | None:
        now = state(cluster, job_id)
        return now if now[0] in states else None

    return wait_for(f"job {job_id} in {states}", probe, timeout_s)


def gpus_used(cluster: SlurmCluster) -> str:
    return node(cluster)[2]


def node(cluster: SlurmCluster) -> list[str]:
    """sinfo's line for the node: name, GRES, GRES in use, long state."""
    out = cluster.run(
        "sinfo",
        "--noheader",
        "--Node",
        f"--partition={cluster.partition}",
        "--Format=NodeList:|,Gres:|,GresUsed:|,StateLong:",
    ).stdout
    lines = out.splitlines()
    assert len(lines) == 1, out
    return lines[0].split("|")


def test_the_node_offers_its_gpus(slurm_cluster: SlurmCluster) -> None:
    def idle() -> list[str] | None:
        line = node(slurm_cluster)
        return line if line[3] == "idle" else None

    name, gres, used, node_state = wait_for("an idle node", idle)
    assert name == slurm_cluster.node == "gpuq-node"
    assert gres == f"gpu:{slurm_cluster.gpus}" == "gpu:4"
    assert used == "gpu:0"
    assert node_state == "idle"
    # No accounting storage: sacct cannot help the executor.
    sacct = slurm_cluster.run("sacct", "--jobs=1", check=False)
    assert sacct.returncode != 0
    assert "accounting storage is disabled" in sacct.stderr


def test_a_job_runs_on_two_gpus(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    wait_for("free GPUs", lambda: gpus_used(slurm_cluster) == "gpu:0")
    env_file = tmp_path / "env"
    job = script(
        tmp_path,
        "gpus.sh",
        f"env > {env_file}.tmp && mv {env_file}.tmp {env_file}\nsleep 2\n",
    )
    output = tmp_path / "out"
    submitted = time.monotonic()
    job_id = submit(
        slurm_cluster,
        job,
        "--job-name=gpuq-1",
        "--gres=gpu:2",
        "--time=1",
        f"--output={output}",
        "--signal=B:TERM@30",
    )
    wait_state(slurm_cluster, job_id, {"RUNNING"})
    started_s = time.monotonic() - submitted
    assert started_s < 5, started_s

    listed = slurm_cluster.run(
        "squeue", "--noheader", "--name=gpuq-1", f"--format={SQUEUE_FORMAT}"
    ).stdout
    assert f"{job_id}|gpuq-1|RUNNING|None" in listed.splitlines()
    # GresUsed says how many, not which; the node is "mixed" while it has a job (of 16 CPUs).
    assert node(slurm_cluster)[2:] == ["gpu:2", "mixed"]
    # `scontrol show job -d` says which: "GRES=gpu:2(IDX:0-1)".
    detail = slurm_cluster.run("scontrol", "show", "job", "-d", str(job_id)).stdout
    assert re.search(r"GRES=gpu:2\(IDX:\d+[-,]\d+\)", detail), detail

    wait_for("the job's environment", env_file.exists)
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    # The fake GPUs are numbered as Slurm's own indexes: "0,1" on an idle node.
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2, env["CUDA_VISIBLE_DEVICES"]
    assert env["SLURM_JOB_GPUS"] == env["CUDA_VISIBLE_DEVICES"]
    assert env["GPU_DEVICE_ORDINAL"] == env["CUDA_VISIBLE_DEVICES"]
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["SLURM_JOB_ID"] == str(job_id)
    assert env["SLURM_JOB_NAME"] == "gpuq-1"
    assert env["SLURM_JOB_PARTITION"] == slurm_cluster.partition
    # The job gets sbatch's environment (SLURM_CONF included), not the daemons' shim.
    assert env["SLURM_CONF"] == slurm_cluster.env["SLURM_CONF"]
    assert "LD_PRELOAD" not in env

    wait_state(slurm_cluster, job_id, {"COMPLETED"})
    shown = slurm_cluster.show_job(job_id)
    assert (shown["JobState"], shown["ExitCode"], shown["Reason"]) == ("COMPLETED", "0:0", "None")
    assert shown["JobName"] == "gpuq-1"
    assert shown["TimeLimit"] == "00:01:00"
    # Without --states (or --states=all), squeue lists no finished job, even by id: exit 0.
    plain = slurm_cluster.run("squeue", "--noheader", f"--jobs={job_id}")
    assert plain.stdout == ""
    assert gpus_used(slurm_cluster) == "gpu:0"


def test_a_job_waits_for_gpus_in_use(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    wait_for("free GPUs", lambda: gpus_used(slurm_cluster) == "gpu:0")
    hog = submit(
        slurm_cluster,
        script(tmp_path, "hog.sh", "sleep 3\n"),
        "--job-name=gpuq-hog",
        "--gres=gpu:3",
        "--output=/dev/null",
    )
    wait_state(slurm_cluster, hog, {"RUNNING"})
    waiting = submit(
        slurm_cluster,
        script(tmp_path, "wait.sh", "true\n"),
        "--job-name=gpuq-waits",
        "--gres=gpu:2",
        "--output=/dev/null",
    )
    # Right after sbatch the reason can be None or Priority; the next pass says Resources.
    assert state(slurm_cluster, waiting)[0] == "PENDING"
    wait_state(slurm_cluster, waiting, {"PENDING"})
    assert wait_for("reason Resources", lambda: state(slurm_cluster, waiting)[1] == "Resources")
    wait_state(slurm_cluster, hog, {"COMPLETED"}, END_S)
    wait_state(slurm_cluster, waiting, {"COMPLETED"}, END_S)


def test_hold_and_release(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = script(tmp_path, "held.sh", "sleep 1\n")
    held = submit(slurm_cluster, job, "--hold", "--job-name=gpuq-held", "--output=/dev/null")
    # Submitted held by root: a user hold.
    assert state(slurm_cluster, held) == ("PENDING", "JobHeldUser")
    slurm_cluster.run("scontrol", "release", str(held))
    wait_state(slurm_cluster, held, {"RUNNING", "COMPLETED"})

    # `scontrol hold` by root is an admin hold; `release` lifts it too.
    later = submit(slurm_cluster, job, "--hold", "--job-name=gpuq-later", "--output=/dev/null")
    slurm_cluster.run("scontrol", "hold", str(later))
    assert state(slurm_cluster, later) == ("PENDING", "JobHeldAdmin")
    # Cancelling a pending job: CANCELLED at once; its reason stays the hold's.
    slurm_cluster.run("scancel", str(later))
    assert state(slurm_cluster, later) == ("CANCELLED", "JobHeldAdmin")
    assert slurm_cluster.show_job(later)["ExitCode"] == "0:0"
    wait_state(slurm_cluster, held, {"COMPLETED"}, END_S)


def test_dependencies(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    first = submit(
        slurm_cluster,
        script(tmp_path, "first.sh", "sleep 1\n"),
        "--job-name=gpuq-first",
        "--output=/dev/null",
    )
    then = submit(
        slurm_cluster,
        script(tmp_path, "then.sh", "true\n"),
        f"--dependency=afterok:{first}",
        "--job-name=gpuq-then",
        "--output=/dev/null",
    )
    assert state(slurm_cluster, then) == ("PENDING", "Dependency")
    wait_state(slurm_cluster, then, {"COMPLETED"}, END_S)
    assert state(slurm_cluster, first)[0] == "COMPLETED"

    # After a failure, afterok can never be met: the dependent job stays PENDING.
    failing = submit(
        slurm_cluster,
        script(tmp_path, "fails.sh", "exit 3\n"),
        "--job-name=gpuq-fails",
        "--output=/dev/null",
    )
    stuck = submit(
        slurm_cluster,
        script(tmp_path, "stuck.sh", "true\n"),
        f"--dependency=afterok:{failing}",
        "--job-name=gpuq-stuck",
        "--output=/dev/null",
    )
    assert wait_state(slurm_cluster, failing, {"FAILED"}) == ("FAILED", "NonZeroExitCode")
    shown = slurm_cluster.show_job(failing)
    assert (shown["JobState"], shown["ExitCode"]) == ("FAILED", "3:0")
    assert wait_for(
        "DependencyNeverSatisfied",
        lambda: state(slurm_cluster, stuck) == ("PENDING", "DependencyNeverSatisfied"),
    )
    slurm_cluster.run("scancel", str(stuck))
    assert state(slurm_cluster, stuck)[0] == "CANCELLED"


def test_nice(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job = script(tmp_path, "nice.sh", "true\n")
    # Root may also lower a job's nice value below 0.
    for nice in ("100", "-5"):
        job_id = submit(
            slurm_cluster, job, f"--nice={nice}", "--job-name=gpuq-nice", "--output=/dev/null"
        )
        assert slurm_cluster.show_job(job_id)["Nice"] == nice
        listed = slurm_cluster.run("squeue", "--noheader", f"--jobs={job_id}", "--format=%y")
        assert listed.stdout.strip() in {nice, ""}  # "" once it has finished
        wait_state(slurm_cluster, job_id, {"COMPLETED"}, END_S)


def test_term_then_cancel(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    termed = tmp_path / "termed"
    started = tmp_path / "started"
    job = script(
        tmp_path,
        "stubborn.sh",
        f"trap 'echo TERM >> {termed}' TERM\ntouch {started}\nwhile true; do sleep 0.1; done\n",
    )
    job_id = submit(slurm_cluster, job, "--job-name=gpuq-term", f"--output={tmp_path / 'out'}")
    wait_state(slurm_cluster, job_id, {"RUNNING"})
    wait_for("the batch script", started.exists)
    # Without --full (or --batch), the signal goes to job steps only, not the batch script:
    # scancel says nothing and exits 0.
    slurm_cluster.run("scancel", "--signal=TERM", str(job_id))
    time.sleep(0.5)
    assert not termed.exists()
    # --full: the batch shell and all its processes get it; the job goes on if it traps it.
    slurm_cluster.run("scancel", "--signal=TERM", "--full", str(job_id))
    wait_for("SIGTERM to the batch script", termed.exists)
    assert state(slurm_cluster, job_id) == ("RUNNING", "None")
    # A plain scancel: SIGTERM, then SIGKILL after KillWait (5 s); COMPLETING meanwhile.
    cancelled = time.monotonic()
    slurm_cluster.run("scancel", str(job_id))
    assert state(slurm_cluster, job_id)[0] in {"COMPLETING", "CANCELLED"}
    wait_state(slurm_cluster, job_id, {"CANCELLED"}, END_S)
    assert time.monotonic() - cancelled < END_S
    shown = slurm_cluster.show_job(job_id)
    assert (shown["JobState"], shown["ExitCode"]) == ("CANCELLED", "0:9")
    assert termed.read_text().count("TERM") == 2


def test_a_job_that_ends_on_term(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    started = tmp_path / "started"
    job = script(tmp_path, "sleeper.sh", f"touch {started}\nsleep 60\n")
    job_id = submit(slurm_cluster, job, "--job-name=gpuq-sleeper", "--output=/dev/null")
    wait_state(slurm_cluster, job_id, {"RUNNING"})
    # RUNNING in squeue comes before the batch script runs: a signal sent in between finds
    # no process, and the job ends by SIGKILL after KillWait (ExitCode 0:9), not by SIGTERM.
    wait_for("the batch script", started.exists)
    slurm_cluster.run("scancel", str(job_id))
    wait_state(slurm_cluster, job_id, {"CANCELLED"}, END_S)
    shown = slurm_cluster.show_job(job_id)
    assert (shown["JobState"], shown["ExitCode"]) == ("CANCELLED", "0:15")


def test_a_forgotten_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """After MinJobAge (30 s, and up to a minute more) a job is unknown, as this id is."""
    unknown = "987654"
    for command in (
        ("squeue", "--noheader", f"--jobs={unknown}"),
        ("squeue", "--noheader", "--states=all", f"--jobs={unknown}"),
        ("scontrol", "show", "job", unknown, "--oneliner"),
    ):
        done = slurm_cluster.run(*command, check=False)
        assert done.returncode == 1, command
        assert done.stdout == ""
        assert done.stderr.strip() == "slurm_load_jobs error: Invalid job id specified"
    # Asked about several ids, squeue lists those it knows and says nothing of the others.
    known = submit(
        slurm_cluster,
        script(tmp_path, "known.sh", "true\n"),
        "--job-name=gpuq-known",
        "--output=/dev/null",
    )
    wait_state(slurm_cluster, known, {"COMPLETED"}, END_S)
    several = slurm_cluster.run(
        "squeue",
        "--noheader",
        "--states=all",
        f"--jobs={known},{unknown}",
        f"--format={SQUEUE_FORMAT}",
    )
    assert (several.stdout, several.stderr) == (f"{known}|gpuq-known|COMPLETED|None\n", "")
