"""An attempt's run directory, written by root for a job run as its owner, while the owner
swaps links into everything they can write: real accounts, real links, a real race."""

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuq.contract.account import Account
from gpuq.contract.device_plan import DevicePlan
from gpuq.contract.runspec import RunSpec
from gpuq.contract.spec import JobSpec
from service.executors.base import Launch
from service.executors.prepare import prepare_run
from tests.accounts import ANA, Accounts, throwaway_accounts

#: The owner's side of the race, as a job's processes could run it, swapping a folder and
#: a link to root's files in one step (renameat2's RENAME_EXCHANGE), over and over: in the
#: first attempt's checkpoints `sub` (a folder) and `alt` (a link to root's secrets); in the
#: new attempt's folder, once it can write there, `tensorboard` and a link to a folder of
#: root's. The swaps that landed so far are counted in `counter` (8 bytes).
SWAPPER = """
import ctypes, os, sys, time
checkpoints, secrets, attempt, victims, seconds, counter = sys.argv[1:]
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
def swap(a, b):
    return renameat2(-100, a.encode(), -100, b.encode(), 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
sub, alt = os.path.join(checkpoints, "sub"), os.path.join(checkpoints, "alt")
board, link = os.path.join(attempt, "tensorboard"), os.path.join(attempt, "tb")
os.symlink(secrets, alt)
landed, count = 0, os.open(counter, os.O_WRONLY)
end = time.time() + float(seconds)
while time.time() < end:
    landed += swap(sub, alt)
    try:
        os.symlink(victims, link)
    except OSError:
        pass
    landed += swap(board, link)
    os.pwrite(count, landed.to_bytes(8, "little"), 0)
"""
#: copies wanted while the swaps race, and the most tries for them (a loaded machine's
#: scheduler may let the swapper win many in a row: 120 tries once all failed in CI; a
#: failed try costs milliseconds)
COPIES, TRIES = 12, 1000
SHARDS = 300


@pytest.fixture(scope="module")
def accounts() -> Iterator[Accounts]:
    with throwaway_accounts() as made:
        yield made


def launch(attempt: int, account: Account, resume_from: int | None = None) -> Launch:
    spec = JobSpec(kind="command", command={"argv": ["true"]})
    return Launch(
        job_id=1,
        attempt=attempt,
        spec=spec,
        devices=DevicePlan.cpu(),
        resume_from=resume_from,
        run_as=account,
    )


def swaps_landed(counter: Path) -> int:
    return int.from_bytes(counter.read_bytes() or b"\0", "little")


def copied_files(folder, name: str) -> list[str]:
    """What files called `name` hold in `folder`, its links not followed."""
    return [
        (Path(where) / name).read_text()
        for where, _, files in os.walk(folder)
        if name in files and not (Path(where) / name).is_symlink()
    ]


def test_roots_copy_and_handover_never_follow_a_link_the_owner_swaps_in(accounts, tmp_path):
    ana = accounts.ana
    account = Account(ANA, ana.pw_uid, ana.pw_gid, (ana.pw_gid,), ana.pw_dir)
    runs = accounts.scratch / "runs"
    secrets = accounts.scratch / "roots"
    secrets.mkdir(mode=0o700)
    (secrets / "secret.txt").write_text("root's alone")
    victims = accounts.scratch / "etc"
    victims.mkdir()
    victim = victims / "victim.conf"
    victim.write_text("root's, readable by all")
    victim.chmod(0o644)

    first, _ = prepare_run(runs, launch(1, account))
    sub = first.checkpoints / "sub"
    subprocess.run(["runuser", "-u", ANA, "--", "mkdir", str(sub)], check=True)
    subprocess.run(["runuser", "-u", ANA, "--", "touch", str(sub / "ckpt.weights")], check=True)
    # Many files beside: each copy and handover takes long enough for the swaps to land.
    for i in range(SHARDS):
        shard = first.checkpoints / f"shard-{i:04d}"
        shard.write_bytes(b"w")
        os.chown(shard, ana.pw_uid, ana.pw_gid)
    attempt = first.path.parent / "2"
    counter = accounts.scratch / "swaps"
    counter.touch()
    os.chown(counter, ana.pw_uid, ana.pw_gid)
    argv = [sys.executable, "-c", SWAPPER, str(first.checkpoints), str(secrets), str(attempt)]
    swapper = subprocess.Popen(
        ["runuser", "-u", ANA, "--", *argv, str(victims), "120", str(counter)], cwd="/"
    )
    leaked, copies, raced = [], 0, 0
    try:
        for _ in range(TRIES):
            before = swaps_landed(counter)
            try:
                run, _ = prepare_run(runs, launch(2, account, resume_from=1))
            except OSError:
                continue  # the copy met a link mid-way: a failed start, nothing leaked
            leaked += copied_files(run.checkpoints, "secret.txt")
            copies += 1
            raced += swaps_landed(counter) > before
            if copies == COPIES:
                break
    finally:
        subprocess.run(["pkill", "-KILL", "-u", ANA], check=False)  # runuser's session and all
        swapper.wait()

    assert leaked == []
    for path in (victims, victim):
        info = path.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode) & 0o044) == (0, 0o044), path
    assert raced > 0, f"no swap landed during any of the {copies} copies"
    # With nobody racing, the checkpoints arrive, the owner's, and links stay links.
    run, _ = prepare_run(runs, launch(2, account, resume_from=1))
    assert copied_files(run.checkpoints, "ckpt.weights") == [""]
    for path in (run.path, *run.path.rglob("*")):
        assert path.lstat().st_uid == ana.pw_uid, path


def test_an_attempts_run_directory_is_written_afresh(tmp_path):
    """What `prepare_run` writes before a runner starts: the spec, an empty log; what a
    start whose claim never committed left there is gone."""
    plain = Launch(
        job_id=1,
        attempt=1,
        spec=JobSpec(kind="command", command={"argv": ["true"]}),
        devices=DevicePlan.cpu(),
    )
    run, env = prepare_run(tmp_path / "runs", plain)
    (run.path / "exit.json").write_text("{}")
    run, env = prepare_run(tmp_path / "runs", plain)
    written = RunSpec.model_validate_json(run.spec.read_text())
    assert (written.job_id, written.attempt, written.spec) == (1, 1, plain.spec)
    assert run.log.read_bytes() == b""
    assert sorted(p.name for p in run.path.iterdir()) == ["output.log", "spec.json"]
    assert env["GPUQ_RUN_DIR"] == str(run.path)
