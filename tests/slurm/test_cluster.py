"""The test cluster does what the Slurm executor will ask of Slurm 22.05, command by command.

Each test submits its own small jobs (named gpuq-...) and waits for them to end; only the
GPU tests ask for GPUs, so the others never wait on them. Most jobs run in the default
partition (`gpu`: one node); the multi-node tests run over both nodes of partition `multi`,
with srun, and cancel what they started whatever happens.
"""

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    """sinfo's line for the default partition's node: name, GRES, GRES in use, long state."""
    lines = nodes(cluster, cluster.partition)
    assert len(lines) == 1, lines
    return lines[0]


def nodes(cluster: SlurmCluster, partition: str) -> list[list[str]]:
    """sinfo's lines for a partition's nodes: name, GRES, GRES in use, long state."""
    out = cluster.run(
        "sinfo",
        "--noheader",
        "--Node",
        f"--partition={partition}",
        "--Format=NodeList:|,Gres:|,GresUsed:|,StateLong:",
    ).stdout
    return [line.split("|") for line in out.splitlines()]


def test_the_node_offers_its_gpus(slurm_cluster: SlurmCluster) -> None:
    def idle() -> list[str] | None:
        line = node(slurm_cluster)
        return line if line[3] == "idle" else None

    name, gres, used, node_state = wait_for("an idle node", idle)
    assert name == slurm_cluster.node == "gpuq-n1"
    assert gres == f"gpu:{slurm_cluster.gpus}" == "gpu:4"
    assert used == "gpu:0"
    assert node_state == "idle"
    # The other partition has both nodes (two slurmd's on this host), each with its GPUs.
    assert slurm_cluster.nodes == ("gpuq-n1", "gpuq-n2")
    assert [line[:2] for line in nodes(slurm_cluster, slurm_cluster.multi_partition)] == [
        ["gpuq-n1", "gpu:4"],
        ["gpuq-n2", "gpu:4"],
    ]
    # sinfo without --partition lists gpuq-n1 once per partition; `gpu` is the default.
    listed = slurm_cluster.run("sinfo", "--noheader", "--format=%P|%D|%N").stdout.split()
    assert listed == ["gpu*|1|gpuq-n1", "multi|2|gpuq-n[1-2]"]
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


# Jobs over both nodes: one task on each, launched by srun from the batch script (which runs
# on the first node), as a multi-node gpuq job would be.

#: States a job leaves: once in none of these, it has ended.
LIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}


def two_nodes(cluster: SlurmCluster) -> tuple[str, ...]:
    """sbatch's options for one task and one GPU on each of the two nodes."""
    return (
        f"--partition={cluster.multi_partition}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:1",
        "--time=2",
    )


@contextmanager
def submitted(cluster: SlurmCluster, path: Path, *options: str) -> Iterator[int]:
    """`submit`, and at the end, whatever happened, scancel the job and wait for its end."""
    job_id = submit(cluster, path, *options)
    try:
        yield job_id
    finally:
        cluster.run("scancel", str(job_id), check=False)

        def gone() -> bool:
            found = row(cluster, job_id)
            return found is None or found[2] not in LIVE

        wait_for(f"job {job_id} to end", gone, END_S)


def ended(cluster: SlurmCluster, job_id: int, output: Path) -> str:
    """Waits for the job to end; its final state (the output shown when it is not COMPLETED)."""
    final = wait_for(
        f"job {job_id} to end",
        lambda: (now := state(cluster, job_id)[0]) not in LIVE and now,
        END_S,
    )
    assert final == "COMPLETED", (final, output.read_text() if output.exists() else "")
    return final


def environment(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def notes(path: Path) -> list[tuple[float, str]]:
    """A task's notes (see TASK_NOTES): (time.time(), what) a line."""
    if not path.exists():
        return []
    return [
        (float(t), what)
        for t, what in (line.split(" ", 1) for line in path.read_text().splitlines())
    ]


#: What a task program starts with: note(what) appends "time what" to DIR/NAME.RANK.
TASK_NOTES = """\
import os, signal, subprocess, sys, time

DIR = {directory!r}
# SLURM_PROCID is 0 in the batch step too; SLURM_STEP_ID is only a step's (srun's tasks').
RANK = os.environ["SLURM_PROCID"] if "SLURM_STEP_ID" in os.environ else "batch"


def note(what, name={name!r}):
    with open(f"{{DIR}}/{{name}}.{{RANK}}", "a") as file:
        file.write(f"{{time.time():.6f}} {{what}}\\n")


CATCHABLE = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)
"""


def program(directory: Path, name: str, body: str) -> Path:
    """A Python program under `directory` that notes into DIR/NAME.RANK."""
    path = directory / f"{name}.py"
    path.write_text(
        f"#!{sys.executable}\n" + TASK_NOTES.format(directory=str(directory), name=name) + body
    )
    path.chmod(0o755)
    return path


def test_a_job_over_two_nodes_runs_one_task_on_each(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    batch = script(
        tmp_path,
        "two.sh",
        f"""env > {tmp_path}/batch.env
scontrol show hostnames "$SLURM_JOB_NODELIST" > {tmp_path}/hostnames
scontrol show job -d "$SLURM_JOB_ID" > {tmp_path}/detail
srun --kill-on-bad-exit=1 sh -c 'env > {tmp_path}/task.$SLURM_PROCID.env'
echo "srun $?" >> {tmp_path}/exits
srun --kill-on-bad-exit=1 --gres=none sh -c 'env > {tmp_path}/nogres.$SLURM_PROCID.env'
echo "srun $?" >> {tmp_path}/exits
""",
    )
    output = tmp_path / "out"
    options = two_nodes(slurm_cluster)
    with submitted(
        slurm_cluster, batch, "--job-name=gpuq-two", f"--output={output}", *options
    ) as job_id:
        ended(slurm_cluster, job_id, output)
    assert (tmp_path / "exits").read_text() == "srun 0\nsrun 0\n", output.read_text()
    # In the nodes' order, one a line (the batch script runs on the first).
    assert (tmp_path / "hostnames").read_text() == "gpuq-n1\ngpuq-n2\n"
    batch_env = environment(tmp_path / "batch.env")
    assert batch_env["SLURMD_NODENAME"] == "gpuq-n1"
    assert batch_env["SLURM_JOB_NODELIST"] == "gpuq-n[1-2]"
    assert (batch_env["SLURM_JOB_NUM_NODES"], batch_env["SLURM_NNODES"]) == ("2", "2")
    assert batch_env["SLURM_JOB_PARTITION"] == "multi"
    assert batch_env["CUDA_VISIBLE_DEVICES"] == "0"  # the first node's GPU
    # Each node gave its own GPU 0 (nodes alike are listed as one range).
    detail = (tmp_path / "detail").read_text()
    assert "JOB_GRES=gpu:2" in detail.split(), detail
    assert "Nodes=gpuq-n[1-2] CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:0)" in detail, detail

    for rank, name in enumerate(slurm_cluster.nodes):
        env = environment(tmp_path / f"task.{rank}.env")
        assert env["SLURM_PROCID"] == str(rank)
        assert env["SLURM_NODEID"] == str(rank)
        assert env["SLURMD_NODENAME"] == name
        assert env["SLURM_LOCALID"] == "0"
        assert (env["SLURM_NNODES"], env["SLURM_NTASKS"]) == ("2", "2")
        assert env["SLURM_STEP_NODELIST"] == env["SLURM_JOB_NODELIST"] == "gpuq-n[1-2]"
        assert (env["SLURM_STEP_NUM_NODES"], env["SLURM_STEP_NUM_TASKS"]) == ("2", "2")
        assert env["SLURM_STEP_ID"] == "0"
        # srun without --gres: the task has the job's GPU on its node, set by Slurm (each
        # node's index: 0 on both, which are two different devices).
        assert env["CUDA_VISIBLE_DEVICES"] == "0", env
        assert env["SLURM_STEP_GPUS"] == env["SLURM_JOB_GPUS"] == "0"
        assert env["GPU_DEVICE_ORDINAL"] == "0"
        assert env["SLURM_GPUS_ON_NODE"] == "1"
        assert "LD_PRELOAD" not in env
        # srun --gres=none: the task has no GPU at all.
        bare = environment(tmp_path / f"nogres.{rank}.env")
        assert (bare["SLURMD_NODENAME"], bare["SLURM_STEP_ID"]) == (name, "1")
        assert "CUDA_VISIBLE_DEVICES" not in bare, bare
        assert "SLURM_STEP_GPUS" not in bare, bare


def test_kill_on_bad_exit_ends_the_other_task(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    task = program(
        tmp_path,
        "task",
        """
def caught(number, frame):
    note(f"signal {number}")
    signal.signal(number, signal.SIG_DFL)
    os.kill(os.getpid(), number)  # ends as the signal would have ended it


for number in CATCHABLE:
    signal.signal(number, caught)
note("started")
if RANK == "1":
    time.sleep(1)
    note("exits 3")
    sys.exit(3)
time.sleep(60)
note("slept")
""",
    )
    batch = script(
        tmp_path,
        "fails.sh",
        f"srun --kill-on-bad-exit=1 {task}\necho $? > {tmp_path}/srun.rc\n",
    )
    output = tmp_path / "out"
    options = two_nodes(slurm_cluster)
    with submitted(
        slurm_cluster, batch, "--job-name=gpuq-fails", f"--output={output}", *options
    ) as job_id:
        ended(slurm_cluster, job_id, output)
    first, second = notes(tmp_path / "task.0"), notes(tmp_path / "task.1")
    assert [what for _, what in second] == ["started", "exits 3"]
    # The task on node 0 gets SIGTERM from Slurm at once (KillWait's SIGKILL only comes to
    # a task that outlives it by 5 s), and srun exits 128 + 15.
    assert [what for _, what in first] == ["started", "signal 15"], output.read_text()
    took = first[1][0] - second[1][0]
    assert 0 <= took < 2, took
    assert (tmp_path / "srun.rc").read_text() == "143\n"
    said = output.read_text()
    assert "srun: error: gpuq-n2: task 1: Exited with exit code 3" in said, said
    assert "srun: error: gpuq-n1: task 0: Terminated" in said, said


#: Stands in for a training task: on a signal it saves (half a second) and exits 0.
TRAINER = """
def caught(number, frame):
    note(f"signal {number}")
    time.sleep(0.5)
    note("saved")
    sys.exit(0)


for number in CATCHABLE:
    signal.signal(number, caught)
note("started")
time.sleep(60)
note("slept")
"""

#: Stands in for gpuq's runner as the batch script: srun in a process group of its own, and
#: SIGTERM passed on, by PASS_ON.
RUNNER = """
srun = subprocess.Popen(["srun", "--kill-on-bad-exit=1", {trainer!r}], start_new_session=True)


def passed_on(number, frame):
    note(f"signal {{number}}")
    {pass_on}


signal.signal(signal.SIGTERM, passed_on)
note(f"srun exited {{srun.wait()}}")
"""


def run_trainers(
    cluster: SlurmCluster, tmp_path: Path, pass_on: str
) -> tuple[list[tuple[float, str]], list[list[tuple[float, str]]], str]:
    """A runner (the batch step) whose srun runs a trainer on each node, sent SIGTERM once
    both trainers have started: the runner's notes, each trainer's notes, the job's output."""
    trainer = program(tmp_path, "trainer", TRAINER)
    runner = program(tmp_path, "runner", RUNNER.format(trainer=str(trainer), pass_on=pass_on))
    output = tmp_path / "out"
    options = two_nodes(cluster)
    with submitted(
        cluster, runner, "--job-name=gpuq-runner", f"--output={output}", *options
    ) as job_id:
        for rank in (0, 1):
            path = tmp_path / f"trainer.{rank}"
            wait_for(f"trainer {rank} to start", lambda path=path: notes(path) or None, START_S)
        cluster.run("scancel", "--batch", "--signal=TERM", str(job_id))
        ended(cluster, job_id, output)
    shown = cluster.show_job(job_id)
    assert (shown["JobState"], shown["ExitCode"]) == ("COMPLETED", "0:0")
    trainers = [notes(tmp_path / f"trainer.{rank}") for rank in (0, 1)]
    return notes(tmp_path / "runner.batch"), trainers, output.read_text()


def test_sigterm_passed_on_to_srun_kills_the_tasks(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    runner, trainers, said = run_trainers(
        slurm_cluster, tmp_path, "os.killpg(srun.pid, signal.SIGTERM)"
    )
    # srun, sent SIGTERM, has each task SIGKILLed at once: no task sees a signal it could
    # catch, and srun exits 128 + 9.
    assert [what for _, what in runner] == ["signal 15", "srun exited 137"], said
    assert runner[1][0] - runner[0][0] < 2, runner
    assert [[what for _, what in notes] for notes in trainers] == [["started"], ["started"]]
    assert "srun: forcing job termination" in said, said
    assert "srun: error: gpuq-n1: task 0: Killed" in said, said
    assert "srun: error: gpuq-n2: task 1: Killed" in said, said


def test_scancel_signal_term_reaches_every_task(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """What passes SIGTERM on to the tasks instead: `scancel --signal=TERM JOBID` from the
    batch step signals the job's steps (srun's tasks), not the batch step itself."""
    runner, trainers, said = run_trainers(
        slurm_cluster,
        tmp_path,
        'subprocess.run(["scancel", "--signal=TERM", os.environ["SLURM_JOB_ID"]], check=True)',
    )
    assert [what for _, what in runner] == ["signal 15", "srun exited 0"], said
    for notes_ in trainers:
        assert [what for _, what in notes_] == ["started", "signal 15", "saved"], said
        assert notes_[1][0] - runner[0][0] < 2, (runner, notes_)
