import json
from typing import NamedTuple

import httpx
import pytest
import shellingham
import typer
from typer.core import TyperGroup

from gpuq.http import Client
from service.cli import tables
from service.cli.app import build_app
from service.cli.job_summary import job_summary
from service.cli.main import main
from service.cli.spec_files import load_spec
from service.cli.watch import final_line, progress_line
from tests.conftest import command_spec, ended, serving, wait_for
from tests.fakes import FakeNvml


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


def _leaf_commands(command, path=""):
    """Every command a user can run, by its full name (`users add`); a group that does
    something itself (`gpus`) counts too."""
    found = {}
    if not isinstance(command, TyperGroup) or command.invoke_without_command:
        found[path] = command
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            found.update(_leaf_commands(sub, f"{path} {name}".strip()))
    return found


def test_every_command_but_the_servers_takes_json():
    commands = _leaf_commands(typer.main.get_command(build_app()))
    assert {"submit", "ls", "show", "logs", "watch", "cancel", "artifacts", "gpus"} <= set(commands)
    assert {"hold", "release", "priority", "audit", "gpus release"} <= set(commands)
    assert {"users add", "users ls", "users revoke"} <= set(commands)
    for name, command in commands.items():
        options = {opt for param in command.params for opt in param.opts}
        # `serve` and `mcp` print nothing to parse: they serve (mcp speaks JSON-RPC itself)
        assert ("--json" in options) == (name not in ("serve", "mcp")), name


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


def test_users_add_prints_the_token_alone_on_its_last_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_HOME", str(tmp_path / "gpuq"))
    assert main(["users", "add", "bo"]) == 0
    *_, token = capsys.readouterr().out.splitlines()
    assert " " not in token and len(token) > 30
    assert main(["users", "ls"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "ROLE", "UNIX", "USER", "STATE", "ADDED"]
    assert row.split()[:4] == ["bo", "user", "-", "active"]
    assert main(["users", "revoke", "nobody"]) == 1
    assert capsys.readouterr().err.startswith("gpuq: ")


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
    assert tables.plain(tables.gpus_table(gpus)).splitlines() == [
        "GPU  NAME      STATE   USED/TOTAL MiB  FREE MiB  OTHERS MiB  JOBS (MiB)",
        "0    Fake GPU  in_use  2700/8192       5492      700         3:2048, 4:whole",
        "1    Fake GPU  free    0/8192          8192      -           -",
    ]


def test_table_cells_are_text_not_rich_markup():
    rendered = tables.plain(tables.table(["NAME"], [["[bold]x[/bold]"]]))
    assert rendered.splitlines() == ["NAME", "[bold]x[/bold]"]


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
    assert "17,575 samples/s (8,788 per replica)" in job_summary(job)


def test_show_says_why_a_job_got_its_gpus():
    why = "GPU 0: beside job 3; packed to keep GPU 1 whole for job 6"
    job = {"id": 5, "name": "mlp", "owner": "ana", "status": "running", "assigned_gpus": [0],
           "progress": {}, "placement": why}  # fmt: skip
    lines = job_summary(job).splitlines()
    assert lines[2] == f"  placed: {why}"
    requeued = job | {"status": "queued", "assigned_gpus": []}
    assert "placed:" not in job_summary(requeued)


def test_show_gives_the_cores_and_host_memory_a_job_got_and_used():
    job = {"id": 4, "name": "etl", "owner": "ana", "status": "running", "assigned_gpus": [0],
           "progress": {}, "cpus": 4.0, "host_memory_mb": 32768}  # fmt: skip
    assert "  host: 4 cores, 32 GiB of host memory" in job_summary(job).splitlines()
    ended = job | {"status": "succeeded", "host_memory_peak_mb": 22630, "cpu_time_s": 3780.0}
    line = "  host: 4 cores, 32 GiB of host memory; peak 22.1 GiB, 1 h 3 min CPU time"
    assert line in job_summary(ended).splitlines()
    unasked = job | {"cpus": 0.5, "host_memory_mb": None}
    assert "  host: 0.5 cores" in job_summary(unasked).splitlines()
    nothing = job | {"cpus": None, "host_memory_mb": None}
    assert "host:" not in job_summary(nothing)


# --- the HTTP commands, in-process against the API (`api`: jobs stay queued) ------------


class Ran(NamedTuple):
    code: int
    out: str
    err: str


@pytest.fixture
def gpuq(api, capsys):
    """Runs `gpuq ARGS...` against the `api` service."""

    def run(*args: str) -> Ran:
        code = main(list(args), api=Client(http=api))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "job.json"
    path.write_text(json.dumps(command_spec("print('hi')", gpus=1)))
    return str(path)


def test_hold_and_release_keep_a_job_from_starting_and_let_it_go(api, gpuq, spec_file):
    assert gpuq("submit", spec_file).out == "submitted job 1 (cmd): queued\n"
    held = gpuq("hold", "1")
    assert (held.code, held.out) == (0, "job 1 held: it will not start until `gpuq release 1`\n")
    assert api.get("/v1/jobs/1").json()["held"] is True
    assert "held" in gpuq("show", "1").out
    code, out, _ = gpuq("release", "1", "--json")
    assert code == 0 and json.loads(out)["held"] is False
    assert api.get("/v1/jobs/1").json()["held"] is False


def test_priority_changes_take_negative_values(api, gpuq, spec_file):
    gpuq("submit", spec_file)
    lowered = gpuq("priority", "1", "-5")
    assert (lowered.code, lowered.out) == (0, "job 1 now has priority -5\n")
    assert api.get("/v1/jobs/1").json()["priority"] == -5
    code, out, _ = gpuq("priority", "1", "7", "--json")
    assert code == 0 and json.loads(out)["priority"] == 7
    assert api.get("/v1/jobs/1").json()["priority"] == 7


def test_a_dry_run_says_where_the_job_would_go_and_queues_nothing(api, gpuq, spec_file):
    code, out, _ = gpuq("submit", spec_file, "--dry-run")
    assert code == 0 and out.startswith("would start now on GPU ")
    assert out.splitlines()[1] == "  placed: GPU 0: whole"
    code, out, _ = gpuq("submit", spec_file, "--dry-run", "--json")
    preview = json.loads(out)
    assert preview["would_start"] is True and len(preview["assigned_gpus"]) == 1
    assert set(preview) == {"would_start", "assigned_gpus", "memory_mb", "wait_reason",
                            "placement", "jobs_ahead", "would_preempt"}  # fmt: skip
    assert api.get("/v1/jobs").json()["jobs"] == []


def test_a_dry_run_that_would_wait_says_why(gpuq, tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(command_spec("pass", gpus=2)))
    gpuq("submit", str(path))  # both stay queued: this API does not schedule
    gpuq("submit", str(path))
    preview = json.loads(gpuq("submit", str(path), "--dry-run", "--json").out)
    assert (preview["would_start"], preview["jobs_ahead"]) == (False, 2)
    assert preview["wait_reason"]
    dry_run = gpuq("submit", str(path), "--dry-run")
    assert dry_run.out == f"would wait: {preview['wait_reason']} (2 queued jobs ahead)\n"
    assert len(json.loads(gpuq("ls", "--json").out)["jobs"]) == 2


def test_audit_lists_who_did_what_a_page_at_a_time(gpuq, spec_file):
    gpuq("submit", spec_file)
    gpuq("hold", "1")
    gpuq("priority", "1", "-1")
    code, out, _ = gpuq("audit", "--json")
    page = json.loads(out)
    assert code == 0
    assert [e["action"] for e in page["entries"]] == ["priority", "hold", "submit"]
    assert {e["target"] for e in page["entries"]} == {"job/1"}
    code, out, _ = gpuq("audit", "--limit", "2")
    header, *rows, more = out.splitlines()
    assert header.split() == ["ID", "WHEN", "ACTOR", "ACTION", "TARGET", "DETAIL"]
    assert [r.split()[4] for r in rows] == ["priority", "hold"]
    assert more.startswith("more: gpuq audit --limit 2 --cursor ")
    last = gpuq(*more.removeprefix("more: gpuq ").split()).out
    assert last.splitlines()[1].split()[4] == "submit"


def test_errors_are_one_line_on_stderr_and_bad_arguments_exit_2(gpuq, tmp_path):
    missing_job = gpuq("show", "99")
    assert (missing_job.code, missing_job.err) == (1, "gpuq: 404: job 99 not found\n")
    assert gpuq("show", "abc").code == 2
    assert gpuq("priority", "1").code == 2
    missing_file = gpuq("submit", str(tmp_path / "missing.yaml"))
    assert missing_file.code == 2 and missing_file.err.startswith("gpuq: cannot read")


@pytest.mark.parametrize(
    ("args", "option", "words"),
    [
        (["--gpus", "3"], "'--gpus'", "3 GPUs requested but this box has 2"),
        (["--gpus", "3", "--dry-run"], "'--gpus'", "3 GPUs requested but this box has 2"),
        (["--after", "999"], "'--after'", "job 999 does not exist"),
        (
            ["--sweep", "lr=1,2", "--gpus", "3", "-d"],
            "'--gpus'",
            "3 GPUs requested but this box has 2",
        ),
    ],
)
def test_a_value_gpuq_refuses_is_exit_2_naming_the_option(
    api, gpuq, monkeypatch, args, option, words
):
    monkeypatch.setenv("COLUMNS", "300")
    ran = gpuq("run", *args, "--", "true")
    assert ran.code == 2, ran
    assert f"Invalid value for {option}: {words}" in ran.err
    assert api.get("/v1/jobs").json()["jobs"] == []


def test_ctrl_c_exits_130(capsys):
    def interrupted(request: httpx.Request) -> httpx.Response:
        raise KeyboardInterrupt

    http = httpx.Client(base_url="http://gpuq", transport=httpx.MockTransport(interrupted))
    assert main(["ls"], api=Client(http=http)) == 130


def test_shell_completion_is_offered_and_completes_commands(monkeypatch, capsys):
    # Typer asks which shell started this process; under `make` that is sh, which it does
    # not complete for: answer as a user's bash would.
    monkeypatch.setattr(shellingham, "detect_shell", lambda: ("bash", "/bin/bash"))
    assert main(["--show-completion"]) == 0
    assert "_GPUQ_COMPLETE=complete_bash" in capsys.readouterr().out
    monkeypatch.setenv("_GPUQ_COMPLETE", "complete_bash")
    monkeypatch.setenv("COMP_WORDS", "gpuq ho")
    monkeypatch.setenv("COMP_CWORD", "1")
    assert main([]) == 0
    assert capsys.readouterr().out.split() == ["hold"]
    monkeypatch.setenv("COMP_WORDS", "gpuq ls --status ru")
    monkeypatch.setenv("COMP_CWORD", "3")
    assert main([]) == 0
    assert capsys.readouterr().out.split() == ["running"]


def test_gpus_release_puts_a_draining_gpu_back_into_use(settings, capsys):
    fake = FakeNvml()
    settings = settings.model_copy(update={"sample_s": 0.1, "drain_timeout_s": 60})
    with serving(settings, probe=fake) as client:
        spec = command_spec("import time; time.sleep(1.5)", gpu_ids=[0])
        job_id = client.post("/v1/jobs", json=spec).json()["id"]
        wait_for(client, job_id, lambda j: j["status"] == "running")
        runner = settings.runs_dir / str(job_id) / "1" / "runner.json"
        pid = json.loads(runner.read_text())["train_pid"]
        fake.put(0, pid, 3000)  # memory that outlives the job: GPU 0 drains
        wait_for(client, job_id, lambda j: j["gpu_memory_peak_mb"] == 3000)
        assert wait_for(client, job_id, ended)["status"] == "succeeded"
        assert client.get("/v1/gpus").json()[0]["state"] == "draining"

        assert main(["gpus", "release", "1"], api=Client(http=client)) == 1
        assert capsys.readouterr().err == (
            "gpuq: 409: GPU 1 is free, not draining or quarantined\n"
        )
        assert main(["gpus", "release", "0"], api=Client(http=client)) == 0
        assert capsys.readouterr().out == "released: GPU 0 is free\n"
        assert client.get("/v1/gpus").json()[0]["state"] == "free"
        fake.remove(pid)
        assert main(["gpus"], api=Client(http=client)) == 0
        _, first, _ = capsys.readouterr().out.splitlines()
        assert first.startswith("0 ") and " free " in first


def test_users_are_bound_to_unix_accounts_one_each(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUQ_HOME", str(tmp_path / "gpuq"))
    assert main(["users", "add", "ghost", "--unix-user", "no-such-account-here"]) == 1
    assert "no Unix account 'no-such-account-here'" in capsys.readouterr().err
    assert main(["users", "add", "ana", "--unix-user", "root"]) == 0
    assert main(["users", "add", "bo", "--unix-user", "root"]) == 1
    assert "already bound to user 'ana'" in capsys.readouterr().err
    assert main(["users", "add", "bo"]) == 0
    assert main(["users", "set", "bo"]) == 2  # neither --unix-user nor --no-unix-user
    assert main(["users", "set", "ana", "--no-unix-user"]) == 0
    assert main(["users", "set", "bo", "--unix-user", "root", "--json"]) == 0
    capsys.readouterr()
    assert main(["users", "ls", "--json"]) == 0
    listed = {u["name"]: u["unix_user"] for u in json.loads(capsys.readouterr().out)}
    assert listed == {"ana": None, "bo": "root"}
