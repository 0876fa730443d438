import json

from service.cli import tables
from service.cli.main import load_spec, main, parser
from service.cli.watch import final_line, progress_line


def test_yaml_specs_read_exponents_as_numbers(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("keras:\n  learning_rate: 1e-3\n  epochs: 2\nname: x\ntime_limit_s: 1.5E+2\n")
    assert load_spec(str(path)) == {
        "keras": {"learning_rate": 0.001, "epochs": 2},
        "name": "x",
        "time_limit_s": 150.0,
    }


def test_json_specs_are_read_as_json(tmp_path):
    path = tmp_path / "job.json"
    path.write_text('{"name": "y", "priority": 1}')
    assert load_spec(str(path)) == {"name": "y", "priority": 1}


def test_every_command_but_serve_takes_json():
    commands = parser()._subparsers._group_actions[0].choices
    for name, command in commands.items():
        if name == "serve":
            continue
        if name == "users":
            actions = command._subparsers._group_actions[0].choices
            for action, sub in actions.items():
                assert "--json" in sub.format_usage(), f"users {action}"
        else:
            assert "--json" in command.format_usage(), name


def test_users_json_gives_the_token_and_the_listing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_HOME", str(tmp_path / "gpuq"))
    assert main(["users", "add", "ana", "--admin", "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["name"] == "ana" and added["admin"] is True and len(added["token"]) > 30
    assert main(["users", "revoke", "ana", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "ana", "revoked": True}
    assert main(["users", "ls", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["name"], listed["admin"], listed["revoked"]) == ("ana", True, True)


RUNNING = {
    "id": 4,
    "status": "running",
    "progress": {
        "epoch": 2,
        "epochs": 4,
        "step": 5,
        "steps": 10,
        "fraction": 0.375,
        "samples_per_s": 1234.5,
        "eta_s": 75,
    },
    "metrics": {"loss": 0.123456, "val_loss": None},
}


def test_the_progress_line_has_bar_percent_epoch_step_speed_eta_and_metrics():
    assert progress_line(RUNNING) == (
        "job 4 running [#########...............]  38%  epoch 2/4  step 5/10  "
        "1,234 samples/s  ETA 1:15  loss=0.1235  val_loss=nan"
    )


def test_queued_and_final_lines_say_why():
    queued = {"id": 5, "status": "queued", "queue_position": 2, "wait_reason": "waiting for 2 GPUs"}
    assert progress_line(queued) == "job 5 queued #2: waiting for 2 GPUs"
    failed = {
        "id": 6,
        "status": "failed",
        "reason": "gpu_oom",
        "message": "out of GPU memory: raise memory_mb",
        "exit_code": 3,
    }
    assert final_line(failed) == (
        "job 6 failed (gpu_oom): out of GPU memory: raise memory_mb [exit code 3]"
    )


def test_the_gpu_table_lines_up_memory_others_and_jobs():
    gpus = [
        {
            "index": 0,
            "name": "Fake GPU",
            "simulated": False,
            "state": "in_use",
            "memory_used_mb": 2700,
            "memory_total_mb": 8192,
            "memory_free_mb": 5492,
            "foreign_processes": [{"pid": 9, "memory_mb": 700}],
            "allocations": [{"job_id": 3, "memory_mb": 2048}, {"job_id": 4, "memory_mb": None}],
        },
        {
            "index": 1,
            "name": "Fake GPU",
            "simulated": False,
            "state": "free",
            "memory_used_mb": 0,
            "memory_total_mb": 8192,
            "memory_free_mb": 8192,
            "foreign_processes": [],
            "allocations": [],
        },
    ]
    assert tables.gpus_table(gpus).splitlines() == [
        "GPU  NAME      STATE   USED/TOTAL MiB  FREE MiB  OTHERS MiB  JOBS (MiB)",
        "0    Fake GPU  in_use  2700/8192       5492      700         3:2048, 4:whole",
        "1    Fake GPU  free    0/8192          8192      -           -",
    ]


def test_show_gives_throughput_per_replica_for_a_multi_replica_job():
    job = {
        "id": 3,
        "name": "mlp",
        "owner": "ana",
        "status": "succeeded",
        "assigned_gpus": [0, 1],
        "num_replicas": 2,
        "progress": {"epoch": 4, "epochs": 4, "step": 10, "steps": 10, "fraction": 1.0,
                     "samples_per_s": 17575.0},
    }  # fmt: skip
    assert "17,575 samples/s (8,788 per replica)" in tables.job_summary(job)
