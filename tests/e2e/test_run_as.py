"""Jobs run as their owners (GPUQ_RUN_AS=owner): real Unix accounts, real `setresuid`.

The accounts are throwaway (`tests.accounts`): ana's job must run with ana's uid, groups,
HOME and umask; its run directory is hers alone, so bob cannot read it, while gpuq (root)
still serves her logs and files to her token.
"""

import io
import json
import os
import stat
import sys
import tarfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pexpect
import pytest

from service.settings import OTHER_VARIABLES, Settings
from service.store.db import Database
from service.store.migrate import upgrade
from service.team import users
from tests.accounts import ANA, BOB, Accounts, as_user, throwaway_accounts
from tests.conftest import TINY_KERAS, ended, serving, wait_for
from tests.e2e.server import Server
from tests.e2e.sse import read_events

#: What a job prints about who it runs as; then it leaves a file among its artifacts.
WHOAMI = """
import json, os
os.umask(os.umask(0))
print(json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
    "groups": sorted(os.getgroups()), "home": os.environ["HOME"], "user": os.environ["USER"],
    "umask": os.umask(0o077)}))
open(os.path.join(os.environ["GPUQ_ARTIFACTS_DIR"], "note.txt"), "w").write("ana's")
"""


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    with throwaway_accounts() as made:
        yield made


def owner_settings(settings: Settings, accounts: Accounts, name: str) -> Settings:
    # GPUQ_HOME where every account may pass through (tmp_path is root's alone).
    return settings.model_copy(
        update={"home": accounts.scratch / name, "run_as": "owner", "allow_root_jobs": False}
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def team(settings: Settings, accounts: Accounts, request: pytest.FixtureRequest) -> dict[str, Any]:
    """Owner-mode settings and tokens: ana and bob bound to their accounts, eve to none."""
    owned = owner_settings(settings, accounts, request.node.name[:40])
    owned.home.mkdir()
    db = Database.open(owned.db_url)
    upgrade(db)
    tokens = {
        "admin": users.add_user(db, "admin", admin=True),
        "ana": users.add_user(db, "ana", unix_user=ANA),
        "bob": users.add_user(db, "bob", unix_user=BOB),
        "eve": users.add_user(db, "eve"),
    }
    db.dispose()
    return {"settings": owned, "tokens": tokens}


def command(code: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": "who",
        "kind": "command",
        "command": {"argv": [sys.executable, "-c", code], **extra},
        "resources": {"gpus": 1},
    }


def test_a_job_runs_as_its_owner_and_its_files_are_hers_alone(team, accounts):
    tokens = team["tokens"]
    with serving(team["settings"]) as client:
        client.headers.update(bearer(tokens["admin"]))  # for `wait_for`
        submitted = client.post("/v1/jobs", json=command(WHOAMI), headers=bearer(tokens["ana"]))
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        job = wait_for(client, job_id, lambda j: j["status"] in {"succeeded", "failed"})
        assert job["status"] == "succeeded", job
        assert job["unix_user"] == ANA
        log = client.get(f"/v1/jobs/{job_id}/logs", headers=bearer(tokens["ana"]))
        assert log.status_code == 200
        seen = json.loads(log.text.strip().splitlines()[-1])
        ana = accounts.ana
        assert seen["uid"] == seen["euid"] == ana.pw_uid and seen["gid"] == ana.pw_gid
        assert accounts.team_gid in seen["groups"] and 0 not in seen["groups"]
        assert (seen["home"], seen["user"], seen["umask"]) == (ana.pw_dir, ANA, 0o077)

        note = client.get(f"/v1/jobs/{job_id}/artifacts/note.txt", headers=bearer(tokens["ana"]))
        assert note.status_code == 200 and note.text == "ana's"
        # Others' tokens get neither (the files are hers, as on disk); admins do.
        for path in (f"/v1/jobs/{job_id}/logs", f"/v1/jobs/{job_id}/artifacts/note.txt"):
            assert client.get(path, headers=bearer(tokens["bob"])).status_code == 403
            assert client.get(path, headers=bearer(tokens["admin"])).status_code == 200

    run = team["settings"].runs_dir / str(job_id) / "1"
    for path in (run, run / "output.log", run / "artifacts" / "note.txt", run / "spec.json"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (ana.pw_uid, ana.pw_gid), path
        assert stat.S_IMODE(info.st_mode) & 0o077 == 0, (path, oct(info.st_mode))
    # The job's folder stays gpuq's: ana cannot swap her attempt's folder for a link.
    assert (run.parent.stat().st_uid, stat.S_IMODE(run.parent.stat().st_mode)) == (0, 0o711)
    assert as_user(ANA, "mv", str(run), f"{run}.moved").returncode != 0
    peek = as_user(BOB, "cat", str(run / "output.log"))
    assert peek.returncode != 0 and "Permission denied" in peek.stderr
    assert as_user(ANA, "cat", str(run / "artifacts" / "note.txt")).stdout == "ana's"


def test_a_builtin_job_trains_as_its_owner_on_her_own_data(team, accounts):
    data = Path(accounts.ana.pw_dir) / "data.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i % 3},{i % 2}\n" for i in range(64)))
    os.chown(data, accounts.ana.pw_uid, accounts.ana.pw_gid)
    data.chmod(0o600)  # hers alone: gpuq checks it as her, and the job reads it as her
    keras = {**TINY_KERAS, "data": {"source": "csv", "path": str(data), "label": "y"}}
    spec = {"name": "csv", "keras": keras, "resources": {"gpus": 1}}
    with serving(team["settings"]) as client:
        client.headers.update(bearer(team["tokens"]["admin"]))  # for `wait_for`
        submitted = client.post("/v1/jobs", json=spec, headers=bearer(team["tokens"]["ana"]))
        assert submitted.status_code == 201, submitted.text
        job = wait_for(
            client,
            submitted.json()["id"],
            lambda j: j["status"] != "queued" and j["status"] not in {"starting", "running"},
            timeout_s=180,
        )
        assert job["status"] == "succeeded", job
        # bob may not name ana's file: checked with his rights, not gpuq's.
        refused = client.post("/v1/jobs", json=spec, headers=bearer(team["tokens"]["bob"]))
    assert refused.status_code == 422
    assert "is not readable by you (checked as the Unix account gpuq-test-bob" in refused.text
    model = team["settings"].runs_dir / str(job["id"]) / "1" / "artifacts" / "model.keras"
    assert model.stat().st_uid == accounts.ana.pw_uid


#: What a job prints of its environment: the names, and PATH.
ENVIRONMENT = "import json, os; print(json.dumps(dict(os.environ)))"


def test_a_job_gets_an_environment_gpuq_chose_not_roots(team, accounts, monkeypatch):
    root_bin = os.path.join(os.environ.get("HOME", "/root"), ".local", "bin")
    for name, value in {
        "AWS_SECRET_ACCESS_KEY": "root's key",
        "TF_TOKEN_app_terraform_io": "root's token",
        "SUDO_USER": "admin",
        "LC_TIME": "C.UTF-8",
        "CUDA_CACHE_PATH": "/var/cache/cuda",
        "PATH": f"{root_bin}:{os.environ['PATH']}",
    }.items():
        monkeypatch.setenv(name, value)
    spec = command(ENVIRONMENT, env={"MINE": "set in the spec"})
    with serving(team["settings"]) as client:
        client.headers.update(bearer(team["tokens"]["ana"]))
        submitted = client.post("/v1/jobs", json=spec)
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        job = wait_for(client, job_id, lambda j: j["status"] in {"succeeded", "failed"})
        assert job["status"] == "succeeded", job
        seen = json.loads(client.get(f"/v1/jobs/{job_id}/logs").text.strip().splitlines()[-1])
    for secret in ("AWS_SECRET_ACCESS_KEY", "TF_TOKEN_app_terraform_io", "SUDO_USER"):
        assert secret not in seen
    assert (seen["LC_TIME"], seen["CUDA_CACHE_PATH"]) == ("C.UTF-8", "/var/cache/cuda")
    assert (seen["MINE"], seen["HOME"], seen["USER"]) == (
        "set in the spec",
        accounts.ana.pw_dir,
        ANA,
    )
    assert root_bin not in seen["PATH"].split(":") and "/usr/bin" in seen["PATH"].split(":")
    # What gpuq gives every job, and on a box where to find it (`gpuq` inside the job)
    given = OTHER_VARIABLES - {"GPUQ_URL", "GPUQ_TOKEN"} | {"GPUQ_SOCKET"}
    assert {n for n in seen if n.startswith("GPUQ_")} <= given
    assert seen["GPUQ_SOCKET"] == str(team["settings"].socket_path.absolute())


def test_owners_without_an_account_are_refused_with_how_to_bind_them(team):
    with serving(team["settings"]) as client:
        response = client.post(
            "/v1/jobs", json=command("pass"), headers=bearer(team["tokens"]["eve"])
        )
    assert response.status_code == 403
    assert (
        "GPUQ_RUN_AS=owner" in response.text and "gpuq users set eve --unix-user" in response.text
    )


def test_a_queued_job_starts_only_as_the_account_its_owner_is_bound_to_then(team, accounts):
    """The binding is asked again when the job starts: unbound (or bound elsewhere) since it
    was queued, it does not start as the account it was queued with."""
    later = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    mark = Path(accounts.ana.pw_dir) / "unbound-ran"  # hers to write
    spec = {**command(f"open({str(mark)!r}, 'w')"), "not_before": later}
    with serving(team["settings"]) as client:
        client.headers.update(bearer(team["tokens"]["admin"]))
        queued = client.post("/v1/jobs", json=spec, headers=bearer(team["tokens"]["ana"]))
        assert queued.status_code == 201, queued.text
        users.set_unix_user(client.app.state.service.db, "ana", None)
        job = wait_for(client, queued.json()["id"], ended)
    assert (job["status"], job["reason"]) == ("failed", "launch_error") and not mark.exists()
    assert job["message"] == (
        "not started: jobs run as their owner's Unix account (GPUQ_RUN_AS=owner), and ana was "
        f"bound to the Unix account '{ANA}' when it was queued but to none now; an admin binds "
        "them (`gpuq users set ana --unix-user LOGIN`); then submit it again"
    )


def test_run_as_owner_needs_root_and_says_so(accounts):
    home = accounts.scratch / "ana-serves"
    home.mkdir()
    os.chown(home, accounts.ana.pw_uid, accounts.ana.pw_gid)
    done = as_user(
        ANA,
        sys.executable,
        "-m",
        "service.cli.main",
        "serve",
        env={"GPUQ_HOME": str(home), "GPUQ_RUN_AS": "owner", "GPUQ_GPUS": "sim:1"},
    )
    assert done.returncode == 1
    assert "GPUQ_RUN_AS=owner needs gpuq to run as root" in done.stderr
    assert "runs as gpuq-test-ana" in done.stderr


def test_a_hostile_member_can_name_nothing_she_could_not_open_herself(team, accounts):
    """Owner mode's walk: every path judged with ana's own rights, and no refusal quotes a
    file. (tests/e2e/test_hostile_paths.py walks the other modes.)"""
    tokens = team["tokens"]
    trap = Path(accounts.ana.pw_dir) / "innocent.csv"
    trap.symlink_to("/etc/shadow")
    shadow_start = Path("/etc/shadow").read_text()[:12]

    def csv(path: str) -> dict[str, Any]:
        keras = {**TINY_KERAS, "data": {"source": "csv", "path": path, "label": "y"}}
        return {"name": "csv", "keras": keras, "resources": {"gpus": 1}}

    with serving(team["settings"]) as client:
        client.headers.update(bearer(tokens["admin"]))
        bobs = client.post("/v1/jobs", json=command(WHOAMI), headers=bearer(tokens["bob"]))
        wait_for(client, bobs.json()["id"], lambda j: j["status"] == "succeeded")
        bobs_log = team["settings"].runs_dir / str(bobs.json()["id"]) / "1" / "output.log"
        attempts = {
            "/etc/shadow": "is not readable by you",
            str(trap): "is not readable by you",
            str(bobs_log): "cannot be reached",
            f"{accounts.ana.pw_dir}/../../etc/shadow": "'..' segments",
        }
        for path, words in attempts.items():
            response = client.post("/v1/jobs", json=csv(path), headers=bearer(tokens["ana"]))
            assert response.status_code == 422, (path, response.text)
            assert words in response.text and shadow_start not in response.text, response.text
        # Her own program in a folder she cannot enter: refused the same way.
        Path(accounts.bob.pw_dir).chmod(0o700)
        hidden = command(WHOAMI, workdir=accounts.bob.pw_dir)
        response = client.post("/v1/jobs", json=hidden, headers=bearer(tokens["ana"]))
    assert response.status_code == 422 and "you cannot enter" in response.text


def test_local_users_log_in_on_the_socket_by_who_they_are(accounts):
    home = accounts.scratch / "sock"  # short: a socket's path has at most 107 bytes
    server = Server(home)
    server.env.update(GPUQ_RUN_AS="owner")
    server.env.pop("GPUQ_ALLOW_ROOT_JOBS")
    spec = accounts.scratch / "spec.json"
    spec.write_text(json.dumps({**command("pass"), "resources": {"gpus": 0}}))
    spec.chmod(0o644)
    cli = [sys.executable, "-m", "service.cli.main"]
    socket_env = {"GPUQ_SOCKET": str(home / "gpuq.sock")}  # and no GPUQ_URL, no token
    server.start()
    try:
        assert stat.S_IMODE((home / "gpuq.sock").stat().st_mode) == 0o666
        # Open mode, gpuq as root: every caller would be an admin, so the socket that every
        # account may connect to serves root alone, and `gpuq serve` said so.
        done = as_user(ANA, *cli, "submit", str(spec), "--json", env=socket_env)
        assert done.returncode == 1 and "403" in done.stderr, done.stderr
        assert "serves root alone" in done.stderr and f"--unix-user {ANA}" in done.stderr
        said = (home.parent / "serve.log").read_text()
        assert f"local login on {home / 'gpuq.sock'} for root alone while no user exists" in said
        assert as_user("root", *cli, "ls", env=socket_env).returncode == 0
        # Over loopback TCP too: the kernel lists ana's socket with her uid.
        tcp = as_user(ANA, *cli, "ls", env={"GPUQ_URL": server.url})
        assert tcp.returncode == 1 and "403" in tcp.stderr and "serves root alone" in tcp.stderr
        assert httpx.get(f"{server.url}/v1/jobs").status_code == 200  # root's

        admin = server.cli("users", "add", "root", "--admin").splitlines()[-1]
        server.cli("users", "add", "ana", "--unix-user", ANA)
        server.env["GPUQ_TOKEN"] = admin
        done = as_user(ANA, *cli, "submit", str(spec), "--json", env=socket_env)
        assert done.returncode == 0, done.stderr
        job = json.loads(done.stdout)
        assert (job["owner"], job["unix_user"]) == ("ana", ANA)
        assert server.wait(job["id"], {"succeeded", "failed"})["status"] == "succeeded"
        mine = as_user(ANA, *cli, "ls", "--json", env=socket_env)
        assert mine.returncode == 0 and '"owner": "ana"' in mine.stdout

        # bob's account is bound to no gpuq user: refused, and told how to fix it.
        done = as_user(BOB, *cli, "submit", str(spec), env=socket_env)
        assert done.returncode == 1
        assert f"the Unix account '{BOB}'" in done.stderr and "bound to no gpuq user" in done.stderr
        # Over TCP, a token is still needed.
        tcp = as_user(ANA, *cli, "ls", env={"GPUQ_URL": server.url})
        assert tcp.returncode == 1 and "401" in tcp.stderr
        # A socket file left behind by a stopped server does not stop the next one.
        server.kill()
        server.start()
        again = as_user(ANA, *cli, "ls", "--json", env=socket_env)
        assert again.returncode == 0, again.stderr
    finally:
        server.kill()


#: A job that fails as a GPU out of memory would, its log naming the secret in its env
#: (its argv, which others see as in `ps`, names none).
LEAKY = """
import os, sys
secret = os.environ["API_KEY"]
print(f"loading {secret}-data.npz")
print(f"CUDA out of memory. Tried to allocate 2 GiB ({secret}-oom)", file=sys.stderr)
sys.exit(3)
"""


def test_other_members_see_a_jobs_state_but_not_its_log_words_env_or_exemption(team, accounts):
    """Through every read: the job, the list, a long poll, the event stream, `gpuq show`."""
    server = Server(team["settings"].home)  # its database holds the team
    server.env.update(GPUQ_RUN_AS="owner")
    server.env.pop("GPUQ_ALLOW_ROOT_JOBS")
    tokens = team["tokens"]
    spec = command(LEAKY, env={"API_KEY": "s3cr3t-env"})
    spec.update(idle_exempt="s3cr3t-exempt notebook", resources={"gpus": 0})
    server.start()
    try:
        submitted = httpx.post(f"{server.url}/v1/jobs", json=spec, headers=bearer(tokens["ana"]))
        assert submitted.status_code == 201, submitted.text
        job_id = submitted.json()["id"]
        server.env["GPUQ_TOKEN"] = tokens["admin"]
        whole = server.wait(job_id, {"failed", "succeeded"})
        assert (whole["status"], whole["reason"], whole["exit_code"]) == ("failed", "gpu_oom", 3)
        assert "s3cr3t-env-oom" in whole["message"]
        assert "loading s3cr3t-env-data.npz" in whole["log_tail"]
        with httpx.Client(base_url=server.url, headers=bearer(tokens["bob"])) as bob:
            seen = {
                "job": bob.get(f"/v1/jobs/{job_id}").json(),
                "list": bob.get("/v1/jobs").json()["jobs"][0],
                "long poll": bob.get(f"/v1/jobs/{job_id}", params={"wait_s": 1}).json(),
            }
            stream = read_events(bob, "/v1/events", since=0, job_id=job_id)
            seen["event"] = next(e["data"] for e in stream if e["data"]["status"] == "failed")
            stream.close()
        for how, job in seen.items():
            assert "s3cr3t" not in json.dumps(job), (how, job)
            said = (job["status"], job["reason"], job["message"])
            assert said == ("failed", "gpu_oom", "ran out of GPU memory"), how
            assert "message" in job["hidden"]
        hidden = ["message", "log_tail", "spec.command.env", "spec.idle_exempt"]
        assert seen["job"]["hidden"] == hidden
        for name in ("ana", "admin"):
            mine = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers=bearer(tokens[name])).json()
            assert mine["hidden"] == [], name
            assert mine["spec"]["command"]["env"]["API_KEY"] == "s3cr3t-env"
            assert mine["spec"]["idle_exempt"] == "s3cr3t-exempt notebook"
        server.env["GPUQ_TOKEN"] = tokens["bob"]
        shown = server.cli("show", str(job_id))
        assert "s3cr3t" not in shown and "hidden from you (ana's and admins'): message" in shown
    finally:
        server.kill()


def test_gpuq_run_and_gpuq_shell_on_the_socket_run_as_who_you_are(accounts):
    home = accounts.scratch / "term"  # short: a socket's path has at most 107 bytes
    server = Server(home)
    server.env.update(GPUQ_RUN_AS="owner")
    server.env.pop("GPUQ_ALLOW_ROOT_JOBS")
    cli = [sys.executable, "-m", "service.cli.main"]
    socket_env = {"GPUQ_SOCKET": str(home / "gpuq.sock"), "PS1": "READY> "}  # no token
    server.start()
    try:
        server.cli("users", "add", ANA, "--unix-user", ANA)  # as root, no user: root's alone
        done = as_user(ANA, *cli, "run", "--gpus", "0", "--", "id", "-u", env=socket_env)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{accounts.ana.pw_uid}\n"

        pairs = [f"{k}={v}" for k, v in {"PATH": os.environ["PATH"], **socket_env}.items()]
        shell = pexpect.spawn(
            "runuser",
            [
                "-u",
                ANA,
                "--",
                "env",
                "-i",
                *pairs,
                *cli,
                "shell",
                "--gpus",
                "0",
                "--env",
                "PS1",
                "--",
                "/bin/sh",
            ],
            cwd="/",
            encoding="utf-8",
            timeout=60,
        )
        shell.expect("READY> ")
        shell.sendline("echo uid=$(id -u)")
        shell.expect(f"uid={accounts.ana.pw_uid}\r\n")
        shell.expect("READY> ")
        shell.sendline(f"{sys.executable} -m service.cli.main show $GPUQ_JOB_ID")  # gpuq in it
        shell.expect(f"session \\d+ \\(sh\\) by {ANA}: running\r\n")
        shell.expect("  interactive: open since")
        shell.expect("READY> ")
        shell.sendline("exit 5")
        shell.expect(pexpect.EOF)
        shell.close()
        assert shell.exitstatus == 5
    finally:
        server.kill()


def test_a_snapshot_is_unpacked_as_its_owner_and_is_hers_alone(team, accounts, tmp_path):
    """Ana's snapshot: stored 0600 in gpuq's 0700 folder, another member can neither read
    nor name it, and her job's copy is unpacked by her account into her run folder."""
    tokens = team["tokens"]
    tar = tmp_path / "project.tar"
    with tarfile.open(tar, "w") as made:
        for name, body in {"train.py": b"print(open('VERSION').read().strip())\n",
                           "VERSION": b"snapshot-1\n"}.items():  # fmt: skip
            info = tarfile.TarInfo(name)
            info.size = len(body)
            made.addfile(info, io.BytesIO(body))
    with serving(team["settings"]) as client:
        client.headers.update(bearer(tokens["admin"]))
        stored = client.post(
            "/v1/snapshots", content=tar.read_bytes(), headers=bearer(tokens["ana"])
        )
        assert stored.status_code == 201, stored.text
        sha = stored.json()["sha256"]
        spec = command("", snapshot=sha)
        spec["command"]["argv"] = [sys.executable, "train.py"]
        bobs = client.post("/v1/jobs", json=spec, headers=bearer(tokens["bob"]))
        assert bobs.status_code == 422 and "snapshot" in bobs.text
        # as a snapshot nobody stored: bob never learns that ana stored it
        assert (
            client.get(f"/v1/snapshots/{sha}/tar", headers=bearer(tokens["bob"])).status_code == 404
        )
        job_id = client.post("/v1/jobs", json=spec, headers=bearer(tokens["ana"])).json()["id"]
        job = wait_for(client, job_id, ended)
        assert job["status"] == "succeeded", job
        log = client.get(f"/v1/jobs/{job_id}/logs", headers=bearer(tokens["ana"])).text
        assert "snapshot-1" in log
    store = team["settings"].home / "snapshots"
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert stat.S_IMODE((store / f"{sha}.tar").stat().st_mode) == 0o600
    code = team["settings"].runs_dir / str(job_id) / "1" / "code"
    ana = accounts.ana
    for path in (code, code / "train.py"):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (ana.pw_uid, ana.pw_gid), path
    assert as_user(BOB, "cat", str(code / "VERSION")).returncode != 0
