"""Fences on this machine's real kernel, as root: cgroup v1's controllers under
/sys/fs/cgroup and an empty cgroup v2 hierarchy at /sys/fs/cgroup/unified (CI machines are
these machines: a test fails, never skips, where they are missing).

Every test's fences sit under a parent of the test process's own (`gpuq-test-<pid>`), so
parallel workers never meet, and go at the test's end, the parent with them."""

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from service.executors.fences.cgroup_files import remove_folder
from service.executors.fences.choice import cgroup_mounts
from service.executors.fences.v1 import CgroupV1Fences
from service.executors.fences.v2 import CgroupV2Fences

UNIFIED = "/sys/fs/cgroup/unified"

#: the start of every program run inside a fence: it joins the folders in argv[1]
JOIN = (
    "import os, sys, json, time, errno, signal\n"
    "for folder in sys.argv[1].split(':'):\n"
    "    with open(os.path.join(folder, 'cgroup.procs'), 'w') as procs:\n"
    "        procs.write('0')\n"
)

#: a job that escapes its session: a double fork, the grandchild in a session of its own
ESCAPE = (
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(60)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print(json.dumps({'ready': 1}), flush=True)\n"
    "time.sleep(60)\n"
)

#: a job that says so when SIGUSR1 reaches it, and ends
HEARS_USR1 = (
    "def heard(*_):\n"
    "    print(json.dumps({'usr1': 1}), flush=True)\n"
    "    os._exit(0)\n"
    "signal.signal(signal.SIGUSR1, heard)\n"
    "print(json.dumps({'ready': 1}), flush=True)\n"
    "time.sleep(30)\n"
)


def delegated(root: Path, *, nested: bool) -> Path:
    """A folder with a delegated cgroup's files: `nested`, it is not a hierarchy's root
    (it has `cgroup.type`) and holds processes (gpuq's, or a companion unit's)."""
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids\n")
    (root / "cgroup.subtree_control").write_text("")
    (root / "cgroup.procs").write_text("111\n222\n" if nested else "")
    if nested:
        (root / "cgroup.type").write_text("domain\n")
    return root


def job_name() -> str:
    """A fence name like a job's, unique to the test."""
    return f"job-{secrets.randbelow(10**9)}-0"


def parent_for_tests() -> str:
    return f"gpuq-test-{os.getpid()}"


def inside(folders: Sequence[str], program: str) -> "subprocess.Popen[str]":
    """A Python child that joins `folders` and then runs `program`; its stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-c", JOIN + program, ":".join(folders)],
        stdout=subprocess.PIPE,
        text=True,
    )


def said(child: "subprocess.Popen[str]") -> dict:
    """The JSON line a child printed first."""
    assert child.stdout is not None
    return json.loads(child.stdout.readline())


@pytest.fixture
def v1() -> Iterator[CgroupV1Fences]:
    assert os.geteuid() == 0, "the fence tests need root"
    mounts = cgroup_mounts().v1
    assert {"memory", "cpu", "cpuacct", "pids", "freezer", "cpuset", "devices"} <= set(mounts)
    fences = CgroupV1Fences(mounts, parent=parent_for_tests())
    yield fences
    for name in fences.names():
        fences.kill(name)
        fences.remove(name)
    for parent in set(fences.parents.values()):
        assert remove_folder(parent)


@pytest.fixture
def v2() -> Iterator[CgroupV2Fences]:
    """Fences on the real, empty v2 hierarchy (it offers no controller: placement, members,
    freeze and kill are the kernel's all the same)."""
    assert os.geteuid() == 0, "the fence tests need root"
    assert os.path.exists(os.path.join(UNIFIED, "cgroup.controllers")), "no cgroup2 here"
    fences = CgroupV2Fences(UNIFIED, parent=parent_for_tests())
    yield fences
    for name in fences.names():
        fences.kill(name)
        fences.remove(name)
    assert remove_folder(fences.parent)
