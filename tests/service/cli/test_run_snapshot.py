"""`gpuq run` from a git work tree runs the code as it was at submit: the project's snapshot,
uploaded once, unpacked into the job's own copy; then `gpuq rerun` runs that code again and
`gpuq diff` shows what changed. A real scheduler on simulated GPUs, real git, real jobs."""

import json
import os
import sys
from pathlib import Path

import pytest

from gpuq.http import Client
from service.cli.main import main
from service.team import users
from tests.conftest import command_spec, ended, wait_for
from tests.gpuq.snapshots.repos import git, make_repo

TRAIN = "import pathlib; print('version', pathlib.Path('VERSION').read_text().strip())\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    repo = make_repo(
        tmp_path / "project",
        {"sub/train.py": TRAIN, "sub/VERSION": "1\n", ".gitignore": "*.ckpt\n"},
    )
    (repo / "sub" / "big.ckpt").write_bytes(b"\0" * 1000)  # ignored: never uploaded
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("data\n")
    monkeypatch.chdir(repo / "sub")
    return repo


def gpuq(client, capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args), api=Client(http=client))
    out, err = capsys.readouterr()
    return code, out, err


def log_of(client, job_id: int) -> str:
    return client.get(f"/v1/jobs/{job_id}/logs").text


def test_a_job_runs_the_code_as_it_was_at_submit_and_reruns_it(client, capsys, project):
    # Both GPUs held, so the job waits while its folder changes.
    holders = [
        client.post("/v1/jobs", json=command_spec("import time; time.sleep(60)", gpus=1)).json()
        for _ in range(2)
    ]
    for holder in holders:
        wait_for(client, holder["id"], lambda j: j["status"] == "running")

    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py",
                          "--data", "../../data/x.txt")  # fmt: skip
    assert code == 0, err
    job_id = int(out.strip())
    assert "snapshot " in err and "uploaded" in err
    (project / "sub" / "VERSION").write_text("2\n")  # edited after submit

    job = client.get(f"/v1/jobs/{job_id}").json()
    command = job["spec"]["command"]
    assert len(command["snapshot"]) == 64 and command["snapshot_workdir"] == "sub"
    assert "workdir" not in command or command["workdir"] is None
    outside = str(project.parent / "data" / "x.txt")
    assert command["argv"][1:] == ["train.py", "--data", outside], "data stays where it is"
    provenance = job["spec"]["provenance"]
    assert provenance["git_commit"] == git(project, "rev-parse", "HEAD").strip()
    assert provenance["git_branch"] == "main" and provenance["git_dirty"] is False
    assert provenance["folder"] == str(project / "sub")
    assert "CPython" in provenance["python"]

    _, shown, _ = gpuq(client, capsys, "show", str(job_id))
    assert f"  code: snapshot {command['snapshot'][:12]}, in sub (from {project / 'sub'})" in shown
    assert f"  git: {provenance['git_commit'][:12]} on main, clean\n" in shown
    assert "  python: " in shown and "CPython" in shown

    tar = client.get(f"/v1/snapshots/{command['snapshot']}/tar").content
    assert b"big.ckpt" not in tar and b"VERSION" in tar

    for holder in holders:
        client.post(f"/v1/jobs/{holder['id']}/cancel")
    done = wait_for(client, job_id, ended, timeout_s=120)
    assert done["status"] == "succeeded", log_of(client, job_id)
    assert "version 1" in log_of(client, job_id)

    # The same folder again, unchanged since: the same snapshot, nothing uploaded.
    (project / "sub" / "VERSION").write_text("1\n")
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    assert code == 0 and "already stored" in err
    again_id = int(out.strip())
    assert (
        client.get(f"/v1/jobs/{again_id}").json()["spec"]["command"]["snapshot"]
        == (command["snapshot"])
    )

    # Edited and submitted: a new snapshot; `gpuq diff` shows the change.
    (project / "sub" / "VERSION").write_text("3\n")
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    third_id = int(out.strip())
    code, out, _ = gpuq(client, capsys, "diff", str(job_id), str(third_id))
    assert code == 1, out
    assert "changed  sub/VERSION" in out and "-1\n+3\n" in out
    assert "command.argv" in out, "the first one had --data"

    # `gpuq rerun` runs the first job's code again, not the folder's.
    code, out, err = gpuq(client, capsys, "rerun", str(job_id), "--gpus", "2", "--json")
    assert code == 0, err
    rerun = json.loads(out)
    assert rerun["spec"]["resources"]["gpus"] == 2
    assert rerun["spec"]["command"]["snapshot"] == command["snapshot"]
    assert wait_for(client, rerun["id"], ended, timeout_s=120)["status"] == "succeeded"
    assert "version 1" in log_of(client, rerun["id"])


def test_no_snapshot_runs_in_the_folder_and_outside_git_needs_asking(
    client, capsys, project, tmp_path, monkeypatch
):
    code, out, err = gpuq(client, capsys, "run", "-d", "--no-snapshot", "--", sys.executable,
                          "train.py")  # fmt: skip
    assert code == 0 and "snapshot" not in err
    spec = client.get(f"/v1/jobs/{int(out)}").json()["spec"]
    assert spec["command"]["workdir"] == str(project / "sub")
    assert spec["command"].get("snapshot") is None

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "VERSION").write_text("9\n")
    (plain / "train.py").write_text(TRAIN)
    monkeypatch.chdir(plain)
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    assert client.get(f"/v1/jobs/{int(out)}").json()["spec"]["command"].get("snapshot") is None
    code, out, err = gpuq(client, capsys, "run", "-d", "--snapshot", "--", sys.executable,
                          "train.py")  # fmt: skip
    job = client.get(f"/v1/jobs/{int(out)}").json()
    assert job["spec"]["command"]["snapshot_workdir"] == "."
    assert wait_for(client, job["id"], ended, timeout_s=120)["status"] == "succeeded"
    assert "version 9" in log_of(client, job["id"])


def test_an_oversized_project_is_refused_before_anything_is_queued(
    client, capsys, project, monkeypatch
):
    monkeypatch.setenv("GPUQ_SNAPSHOT_MAX_MB", "1")
    (project / "sub" / "weights.bin").write_bytes(b"w" * (3 << 20))
    code, _, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    assert code == 2
    assert "weights.bin" in err and ".gpuqignore" in err and "--no-snapshot" in err
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_another_member_cannot_name_my_snapshot(client, capsys, project):
    _, out, _ = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    spec = client.get(f"/v1/jobs/{int(out)}").json()["spec"]
    users.add_user(client.app.state.service.db, "root", admin=True)
    bo = users.add_user(client.app.state.service.db, "bo")
    theirs = client.post("/v1/jobs", json=spec, headers={"Authorization": f"Bearer {bo}"})
    assert theirs.status_code == 422, theirs.text
    assert theirs.json()["detail"][0]["loc"] == ["body", "command", "snapshot"]


def test_a_program_of_the_project_runs_from_the_copy(client, capsys, project):
    script = project / "sub" / "run.sh"
    script.write_text("#!/bin/sh\necho script sees version $(cat VERSION)\n")
    script.chmod(0o755)
    code, out, err = gpuq(client, capsys, "run", "-d", "--", "./run.sh")
    assert code == 0, err
    job = client.get(f"/v1/jobs/{int(out)}").json()
    assert job["spec"]["command"]["argv"] == ["./run.sh"]
    script.write_text("#!/bin/sh\necho edited\n")  # after submit: not what runs
    assert wait_for(client, job["id"], ended, timeout_s=120)["status"] == "succeeded"
    assert "script sees version 1" in log_of(client, job["id"])


FAIL_ON_2 = (
    "import os, sys; x = os.environ['GPUQ_PARAM_X']; print('x', x, open('VERSION').read());"
    " sys.exit(3 if x == '2' else 0)"
)


def test_a_sweep_shares_one_snapshot_and_reruns_its_failed_members(client, capsys, project):
    code, out, err = gpuq(client, capsys, "run", "-d", "--sweep", "x=1,2,3", "--",
                          sys.executable, "-c", FAIL_ON_2)  # fmt: skip
    assert code == 0, err
    sweep_id = int(out)
    members = client.get("/v1/jobs?limit=10").json()["jobs"]
    assert len({m["spec"]["command"]["snapshot"] for m in members}) == 1, "one snapshot"
    for member in members:
        wait_for(client, member["id"], ended, timeout_s=120)
    failed = [m for m in members if client.get(f"/v1/jobs/{m['id']}").json()["status"] == "failed"]
    assert [m["params"] for m in failed] == [{"x": 2}]

    code, out, err = gpuq(client, capsys, "rerun", "--sweep", str(sweep_id), "--json")
    assert code == 0, err
    sweep = json.loads(out)
    assert sweep["size"] == 4
    again = [j for j in client.get("/v1/jobs?limit=10").json()["jobs"] if j["id"] not in
             {m["id"] for m in members}]  # fmt: skip
    assert [(j["params"], j["sweep_id"]) for j in again] == [({"x": 2}, sweep_id)]
    assert again[0]["spec"]["command"]["snapshot"] == members[0]["spec"]["command"]["snapshot"]

    code, _, err = gpuq(client, capsys, "rerun", "--sweep", str(sweep_id), "--gpus", "2")
    assert code == 2 and "--sweep ID alone" in " ".join(err.split())


def test_gpuq_submit_snapshots_a_command_workdir_in_git(client, capsys, project, tmp_path):
    spec = {**command_spec("print(open('VERSION').read())"), "name": "from-file"}
    spec["command"]["workdir"] = str(project / "sub")
    path = tmp_path / "job.json"
    path.write_text(json.dumps(spec))
    code, out, err = gpuq(client, capsys, "submit", str(path), "--json")
    assert code == 0, err
    command = json.loads(out)["spec"]["command"]
    assert len(command["snapshot"]) == 64 and command["snapshot_workdir"] == "sub"
    code, out, err = gpuq(client, capsys, "submit", str(path), "--no-snapshot", "--json")
    assert json.loads(out)["spec"]["command"]["workdir"] == str(project / "sub")


def test_a_working_folder_that_is_a_file_of_the_snapshot_never_starts_the_job(
    client, capsys, project
):
    _, out, _ = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    spec = client.get(f"/v1/jobs/{int(out)}").json()["spec"]
    spec["command"]["snapshot_workdir"] = "sub/VERSION"  # a file, not a folder
    job = client.post("/v1/jobs", json=spec).json()
    job = wait_for(client, job["id"], ended, timeout_s=120)
    assert (job["status"], job["reason"]) == ("failed", "launch_error")
    assert "cannot run in the snapshot's" in job["message"] and "sub/VERSION" in job["message"]


def test_an_argument_naming_what_the_snapshot_leaves_out_is_made_absolute(
    client, capsys, project, tmp_path
):
    # big.ckpt is ignored by git: the copy lacks it, so the job is told where it really is.
    # train.py and VERSION are in the snapshot: they stay relative, read from the copy.
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py",
                          "--ckpt=big.ckpt", "VERSION", "--out", "not-there-yet")  # fmt: skip
    assert code == 0, err
    argv = client.get(f"/v1/jobs/{int(out)}").json()["spec"]["command"]["argv"]
    ignored = str(project / "sub" / "big.ckpt")
    assert argv[1:] == ["train.py", f"--ckpt={ignored}", "VERSION", "--out", "not-there-yet"]

    # From the project's folder reached through a link: the same snapshot, not none.
    link = tmp_path / "link"
    link.symlink_to(project / "sub")
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    first = client.get(f"/v1/jobs/{int(out)}").json()["spec"]["command"]
    os.chdir(link)
    code, out, err = gpuq(client, capsys, "run", "-d", "--", sys.executable, "train.py")
    assert code == 0, err
    through = client.get(f"/v1/jobs/{int(out)}").json()["spec"]["command"]
    assert through["snapshot"] == first["snapshot"] and through["snapshot_workdir"] == "sub"
