"""What the API does with jobs: submit (and dry runs), cancel, hold, reprioritise, and an
attempt's log and artifacts. Reads go straight to `service.jobs`."""

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from gpuq.contract.rundir import RunDir
from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL
from service import jobs
from service.errors import Forbidden, Invalid, NotFound
from service.jobs.artifacts import Artifact, find_artifact, list_artifacts, open_artifact
from service.jobs.group_commit import Submissions
from service.jobs.submission import Stored, Submission, submission
from service.public import Preview
from service.runtime.checks import SubmitChecks
from service.scheduler.dry_runs import DryRuns
from service.settings import Settings
from service.store.db import Database
from service.store.tables import Job
from service.team.users import Caller


class Jobs:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        checks: SubmitChecks,
        dry_runs: DryRuns,
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.db = db
        self.checks = checks
        self.dry_runs = dry_runs
        self.wake = wake  #: the scheduler, wherever it runs
        #: Stores submissions, concurrent ones in shared commits (group commit).
        self.submissions = Submissions(db, on_stored=wake)

    def close(self) -> None:
        """What is waiting is stored and answered first."""
        self.submissions.close()

    def submit(self, spec: JobSpec, caller: Caller, idempotency_key: str | None = None) -> Stored:
        """Admits `spec` (422 if it can never run here), applies the caller's quotas, stores
        the job with its audit entry and wakes the scheduler; returns once the job is
        committed. `created` is False for a replayed `idempotency_key` (the original job)."""
        return self.submissions.submit(*self._submission(spec, caller, idempotency_key))

    async def submit_async(
        self,
        spec: JobSpec,
        caller: Caller,
        idempotency_key: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> Stored:
        """`submit` on an event loop: the checks, which may read files, and the commit run
        in the submissions' thread while the loop goes on. `params`: a sweep member's, run
        again (`GPUQ_PARAM_<NAME>`)."""
        item = self._submission(spec, caller, idempotency_key, params)
        return await self.submissions.submit_async(*item)

    def _submission(
        self,
        spec: JobSpec,
        caller: Caller,
        idempotency_key: str | None,
        params: dict[str, Any] | None = None,
    ) -> tuple[Submission, Callable[[], None]]:
        """What `caller` submits, and its checks."""
        defaults = self.checks.share_defaults
        rules = limits(self.settings)
        item = submission(spec, caller, idempotency_key, rules, defaults, params=params)
        return item, partial(self.checks.check, spec, caller)

    def preview(self, spec: JobSpec, caller: Caller) -> Preview:
        """A dry run: where `spec` would start now, or why it would wait."""
        self.checks.check(spec, caller)
        return self.dry_runs.preview(spec, caller.name)

    def cancel(self, job_id: int, caller: Caller) -> Job:
        job = jobs.cancel_job(self.db, job_id, caller)
        self.wake()
        return job

    def hold(self, job_id: int, caller: Caller, *, held: bool) -> Job:
        job = jobs.set_held(self.db, job_id, caller, held=held)
        if not held:
            self.wake()
        return job

    def change_priority(self, job_id: int, caller: Caller, priority: int | None) -> Job:
        if priority is None:
            return jobs.get_job(self.db, job_id)
        job = jobs.set_priority(self.db, job_id, caller, priority)
        self.wake()
        return job

    def ended(self, job_id: int) -> bool:
        return jobs.get_job(self.db, job_id).status in TERMINAL

    # --- an attempt's files ----------------------------------------------------------------

    def log_path(self, job_id: int, caller: Caller) -> Path | None:
        """The latest attempt's log; None while the job was never launched (404: no job)."""
        attempt = self._files_of(job_id, caller).attempt
        return self._run_dir(job_id, attempt).log if attempt else None

    def artifacts(
        self, job_id: int, attempt: int | None, caller: Caller
    ) -> tuple[int, list[Artifact]]:
        """The attempt asked for (default: the latest; 0 if never launched) and its files."""
        chosen = self._attempt(job_id, attempt, caller)
        return chosen, list_artifacts(self._run_dir(job_id, chosen)) if chosen else []

    def artifact(
        self, job_id: int, name: str, attempt: int | None, caller: Caller
    ) -> tuple[Artifact, BinaryIO]:
        """One file of an attempt, opened; 404 if there is none by that name."""
        chosen = self._attempt(job_id, attempt, caller)
        if not chosen:
            raise NotFound(f"job {job_id} has not started, so it has no files yet")
        run = self._run_dir(job_id, chosen)
        found = find_artifact(run, name)
        return found, open_artifact(found, run)

    def _run_dir(self, job_id: int, attempt: int) -> RunDir:
        """Where an attempt's files are: the same for every executor (the run-directory
        protocol), so an API process needs none to find them."""
        return RunDir.of(self.settings.runs_dir, job_id, attempt)

    def _files_of(self, job_id: int, caller: Caller) -> Job:
        """The job, if `caller` may read its files: under GPUQ_RUN_AS=owner they are its
        owner's alone (and admins'), as on disk; elsewhere the team's."""
        job = jobs.get_job(self.db, job_id)
        if self.settings.run_as == "owner" and not caller.manages(job.owner):
            raise Forbidden(f"job {job_id}'s files are {job.owner}'s (GPUQ_RUN_AS=owner)")
        return job

    def _attempt(self, job_id: int, attempt: int | None, caller: Caller) -> int:
        job = self._files_of(job_id, caller)
        if attempt is not None and attempt > job.attempt:
            raise Invalid(("query", "attempt"), f"job {job_id} has had {job.attempt} attempt(s)")
        return attempt or job.attempt


def limits(settings: Settings) -> jobs.Limits:
    """A submitter's limits: jobs queued at once, the highest priority they may ask."""
    return jobs.Limits(settings.max_jobs_queued, settings.max_user_priority)
