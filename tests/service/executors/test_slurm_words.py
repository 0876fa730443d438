"""How gpuq reads Slurm's machine-readable answers and what its states mean to a job."""

from typing import Any

import pytest

from gpuq.contract.slurm_options import SlurmOptions
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import JobStatus, Reason
from service.executors.slurm import commands
from service.executors.slurm.states import Phase, phase, verdict


def test_only_the_first_word_of_a_state_counts():
    assert phase("CANCELLED by 0") == Phase.ended
    assert phase("PENDING") == Phase.waiting
    assert phase("RUNNING") == phase("COMPLETING") == Phase.running
    assert phase("COMPLETED") == phase("TIMEOUT") == Phase.ended


@pytest.mark.parametrize(
    ("state", "status", "reason"),
    [
        ("TIMEOUT", JobStatus.timed_out, Reason.time_limit),
        ("OUT_OF_MEMORY", JobStatus.failed, Reason.host_oom),
        ("NODE_FAIL", JobStatus.failed, Reason.worker_lost),
        ("BOOT_FAIL", JobStatus.failed, Reason.worker_lost),
        ("CANCELLED by 0", JobStatus.cancelled, Reason.cancelled_by_user),
        ("PREEMPTED", JobStatus.queued, Reason.preempted),
    ],
)
def test_slurms_own_endings_become_gpuq_reasons(state, status, reason):
    judged = verdict(state, has_exit_record=True, slurm_id="7")
    assert judged is not None
    assert (judged.status, judged.reason) == (status, reason)
    assert "7" in judged.message


def test_the_runners_record_decides_an_ordinary_end():
    assert verdict("COMPLETED", has_exit_record=True, slurm_id="7") is None
    assert verdict("FAILED", has_exit_record=True, slurm_id="7") is None
    assert verdict(None, has_exit_record=True, slurm_id="7") is None


def test_no_record_means_the_runner_never_started_or_the_job_was_lost():
    never = verdict("FAILED", has_exit_record=False, slurm_id="7")
    assert never is not None and never.reason == Reason.launch_error
    assert "GPUQ_SLURM_PYTHON" in never.message
    lost = verdict(None, has_exit_record=False, slurm_id="7")
    assert lost is not None and lost.reason == Reason.worker_lost
    assert "no longer knows job 7" in lost.message


def test_sbatch_arguments_carry_gpus_time_signal_placement_hold_and_dependencies():
    spec = JobSpec.model_validate(
        {
            "kind": "command",
            "command": {"argv": ["python3", "-c", "pass"]},
            "resources": {"gpus": 2},
            "time_limit_s": 90,
            "slurm": {"qos": "high", "constraint": "a100|h100"},
        }
    )
    argv = commands.sbatch_argv(
        job_id=12,
        script="/runs/12/1/slurm.sh",
        output="/runs/12/1/output.log",
        workdir="/runs/12/1",
        spec=spec,
        where=SlurmOptions(partition="gpu", account="team", qos="high", constraint="a100|h100"),
        grace_s=30,
        priority_nice=995,
        held=True,
        after=("101", "102"),
        extra="--mail-type=NONE --comment='from gpuq'",
    )
    assert argv[:3] == ["sbatch", "--parsable", "--job-name=gpuq-12"]
    assert argv[-1] == "/runs/12/1/slurm.sh"
    for option in (
        "--gres=gpu:2",
        "--time=3",  # 90 s + 30 s grace → 2 minutes, and a minute's margin
        "--signal=B:TERM@30",
        "--partition=gpu",
        "--account=team",
        "--qos=high",
        "--constraint=a100|h100",
        "--hold",
        "--dependency=afterok:101:102",
        "--nice=995",
        "--output=/runs/12/1/output.log",
        "--comment=from gpuq",
    ):
        assert option in argv


def plain_sbatch(spec: JobSpec, **given: Any) -> list[str]:
    """`sbatch`'s arguments for `spec` with no placement, hold, dependency or extras
    (but what is `given`)."""
    plain: dict[str, Any] = {
        "job_id": 1,
        "script": "s",
        "output": "o",
        "workdir": "w",
        "where": SlurmOptions(),
        "grace_s": 30,
        "priority_nice": 1000,
        "held": False,
        "after": (),
        "extra": "",
    }
    return commands.sbatch_argv(spec=spec, **{**plain, **given})


def test_a_cpu_job_without_a_limit_asks_for_neither_gpus_nor_time():
    spec = JobSpec.model_validate(
        {"kind": "command", "command": {"argv": ["true"]}, "resources": {"gpus": 0}}
    )
    argv = plain_sbatch(spec)
    assert not [a for a in argv if a.startswith(("--gres", "--time", "--signal", "--hold"))]


def test_sbatch_parsable_output_with_and_without_a_cluster_name():
    assert commands.parse_sbatch("4242\n") == "4242"
    assert commands.parse_sbatch("4242;gpuq-test\n") == "4242"
    with pytest.raises(commands.SlurmError):
        commands.parse_sbatch("Submitted batch job 4242\n")


def test_squeue_rows_keep_slurms_order_and_words():
    rows = commands.parse_squeue(
        "17|RUNNING|None|gpuq-node\n18|PENDING|Resources|\n19|CANCELLED by 0|None|gpuq-node\n"
    )
    assert [(r.slurm_id, r.state, r.reason) for r in rows] == [
        ("17", "RUNNING", "None"),
        ("18", "PENDING", "Resources"),
        ("19", "CANCELLED by 0", "None"),
    ]


def test_gres_strings_count_gpus_only():
    assert commands.gpu_count("gpu:4") == 4
    assert commands.gpu_count("gpu:a100:4(S:0-1)") == 4
    assert commands.gpu_count("gpu:tesla:2,mps:100") == 2
    assert commands.gpu_count("(null)") == 0


def test_sacct_states_by_job():
    assert commands.parse_sacct("17|COMPLETED\n18|CANCELLED by 0\n18.batch|CANCELLED\n") == {
        "17": "COMPLETED",
        "18": "CANCELLED by 0",
    }


def test_sinfo_nodes_count_their_gpus_and_none_free_on_a_node_that_takes_no_jobs():
    nodes = commands.parse_sinfo(
        "gpuq-node|gpu:4|gpu:2(IDX:0-1)|mixed\n"
        "big|gpu:a100:8|gpu:a100:0|down*\n"
        "gpuq-node|gpu:4|gpu:2(IDX:0-1)|mixed\n"  # listed again for another partition
    )
    assert [(n.node, n.gpus, n.gpus_allocated, n.gpus_free, n.state) for n in nodes] == [
        ("gpuq-node", 4, 2, 2, "mixed"),
        ("big", 8, 0, 0, "down*"),
    ]


def test_a_job_on_several_nodes_asks_for_them_with_one_task_and_its_gpus_on_each():
    spec = JobSpec.model_validate(
        {
            "kind": "command",
            "command": {"argv": ["python3", "train.py"]},
            "resources": {"gpus": 2, "nodes": 3},
        }
    )
    argv = plain_sbatch(spec)
    assert {"--nodes=3", "--ntasks-per-node=1", "--gres=gpu:2"} <= set(argv)
    assert spec.resources.total_gpus == 6


def test_a_jobs_cores_and_host_memory_go_to_slurm_per_node_over_the_sites_own():
    spec = JobSpec.model_validate(
        {"kind": "command", "command": {"argv": ["true"]}, "resources": {"gpus": 2, "nodes": 2}}
    )
    argv = plain_sbatch(spec, extra="--mem=4G --cpus-per-task=2", cpus=2.5, host_memory_mb=32768)
    # whole cores (Slurm counts no fractions), after the site's: sbatch takes the last
    assert argv[-3:] == ["--cpus-per-task=3", "--mem=32768M", "s"]
    assert {"--nodes=2", "--ntasks-per-node=1"} <= set(argv)
    none_asked = plain_sbatch(spec)
    assert not [a for a in none_asked if a.startswith(("--cpus-per-task", "--mem"))]
