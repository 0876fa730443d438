"""Each kind of process builds what it uses and nothing else (`service.runtime.roles`)."""

import os
import threading
from pathlib import Path

from gpuq.contract.processes import LAUNCHER_MODULE
from gpuq.contract.spec import JobSpec
from service.runtime import open_api, open_scheduler, open_with_scheduler
from service.scheduler.lock import SchedulerLock
from tests.conftest import ANA, command_spec

CPU_JOB = JobSpec.model_validate(command_spec("pass", gpus=0))


def launchers() -> list[int]:
    """This process's children running gpuq's launcher (an executor's, once opened)."""
    found = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if LAUNCHER_MODULE.encode() in argv:
                found.append(int(child))
    return found


def threads(name: str) -> int:
    return sum(t.name == name for t in threading.enumerate())


def test_an_api_only_process_builds_no_scheduler_and_no_executor(settings):
    service = open_api(settings)
    try:
        assert service.scheduler is None
        assert launchers() == []
        lock = SchedulerLock(service.db, settings.home)
        lock.take()  # no scheduler holds it
        lock.release()
        # It stores jobs and answers dry runs all the same.
        stored = service.jobs.submit(CPU_JOB, ANA)
        assert stored.created and stored.row["status"] == "queued"
        assert service.jobs.preview(CPU_JOB, ANA).would_start
        assert service.running_jobs() == 0
    finally:
        service.close()


def test_the_scheduler_process_builds_no_api(settings):
    before = threads("gpuq submissions")
    scheduling = open_scheduler(settings)
    try:
        assert threads("gpuq submissions") == before  # nobody submits here
        assert scheduling.scheduler.alive()
        assert len(launchers()) == 1
    finally:
        scheduling.close()
    assert launchers() == []


def test_both_in_one_process_share_one_database_and_one_scheduler(settings):
    service = open_with_scheduler(settings)
    try:
        assert service.scheduler is not None and service.scheduler.alive()
        assert len(launchers()) == 1
        assert threads("gpuq submissions") >= 1
    finally:
        service.close()
    assert not service.scheduler.alive()
