"""A typed Python client for gpuq, for notebooks and scripts.

    from gpuq.client import Gpuq

    with Gpuq() as gq:  # GPUQ_URL and GPUQ_TOKEN, or Gpuq(url=..., token=...)
        job = gq.submit({"name": "mlp", "keras": {...}, "resources": {"gpus": 1}})
        job = gq.wait(job.id)
        print(job.status, job.metrics)
        gq.download(job.id, "model.keras", "mlp.keras")

Every refusal or unreachable server raises `gpuq.http.ApiError`, whose message is the
server's (`404: no job 7`) and whose `status_code` is the HTTP status.

Long because it is one short method per API route the CLI uses
(tests/gpuq/test_client_covers_cli.py holds it to that), and the answers' models, whose
names only mean something next to the methods that return them.
"""

import codecs
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from gpuq.contract.spec import JobSpec
from gpuq.contract.states import TERMINAL, JobStatus, Reason
from gpuq.contract.sweep import SweepSpec
from gpuq.http import ApiError, Client

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

__all__ = [
    "ApiError",
    "Artifact",
    "Drain",
    "Gpuq",
    "Job",
    "Me",
    "Preview",
    "Progress",
    "Sweep",
    "SweepMember",
    "Webhook",
]


class _Answer(BaseModel):
    # Newer servers may send more fields; an older client keeps working.
    model_config = ConfigDict(extra="ignore")


class Progress(_Answer):
    """Where training is; all None before the first epoch (and for command jobs)."""

    epoch: int | None = None
    epochs: int | None = None
    step: int | None = None
    steps: int | None = None
    fraction: float | None = None  #: share of all training done, 0..1
    samples_per_s: float | None = None
    eta_s: float | None = None


class Job(_Answer):
    """A job as the server last reported it (the main fields of `GET /v1/jobs/{id}`)."""

    id: int
    name: str
    owner: str
    status: JobStatus
    reason: Reason | None = None  #: why it ended, once it has
    message: str | None = None  #: one line about `reason`, with a hint
    exit_code: int | None = None
    assigned_gpus: list[int] = Field(default_factory=list)
    attempt: int = 0  #: from 1 once launched
    executor: str | None = None  #: `local` or `slurm`, once handed over
    executor_job_id: str | None = None  #: the runner's pid, or the Slurm job id
    priority: int = 0
    cpus: float | None = None  #: CPU cores it got (per node); None: none asked, no default
    host_memory_mb: int | None = None  #: host memory it got, MiB (per node); likewise
    host_memory_peak_mb: int | None = None  #: its peak host memory, once an attempt ended
    cpu_time_s: float | None = None  #: the CPU time it used, likewise
    held: bool = False
    wait_reason: str | None = None  #: why a queued job is not running yet
    placement: str | None = None  #: why its latest attempt got its GPUs: `GPU 1: idle`
    queue_position: int | None = None
    progress: Progress = Field(default_factory=Progress)
    metrics: dict[str, float | None] = Field(default_factory=dict)  #: None for NaN
    log_tail: list[str] = Field(default_factory=list)  #: last lines of a job that failed
    #: fields of someone else's job left out for you (`log_tail`, `message`...; GPUQ_RUN_AS=owner)
    hidden: list[str] = Field(default_factory=list)
    revision: int  #: grows at every change
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def done(self) -> bool:
        """True once the job is in a final state (succeeded, failed, cancelled, timed_out)."""
        return self.status in TERMINAL


class Preview(_Answer):
    """A dry run: where a job would start now, or why it would wait."""

    would_start: bool
    assigned_gpus: list[int] = Field(default_factory=list)
    memory_mb: int | None = None
    wait_reason: str | None = None
    placement: str | None = None  #: why those GPUs: `GPU 1: idle`
    jobs_ahead: int = 0


class Me(_Answer):
    """Who the server takes you for (`GET /v1/me`)."""

    name: str
    admin: bool = False
    unix_user: str | None = None  #: the Unix account your jobs run as, if bound


class Artifact(_Answer):
    """One file a job left, e.g. `model.keras` or `checkpoints/latest.weights.h5`."""

    name: str
    size_bytes: int
    modified_at: datetime


def _spec_json(spec: JobSpec | dict[str, Any]) -> Any:
    """The request body for `spec`: a dict as given, a `JobSpec` as the fields it was given."""
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", exclude_unset=True)
    return spec


class Gpuq:
    """One gpuq server. `url` and `token` default to `GPUQ_URL` and `GPUQ_TOKEN`; `http`
    is a ready `gpuq.http.Client` to use instead."""

    def __init__(
        self, url: str | None = None, token: str | None = None, *, http: Client | None = None
    ) -> None:
        self.http = http or Client(url, token)

    def submit(self, spec: JobSpec | dict[str, Any], *, idempotency_key: str | None = None) -> Job:
        """Queues a job; the same `idempotency_key` again returns the same job, not a new one.
        A spec that can never run here raises `ApiError` (422) naming the field."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._job("POST", "/v1/jobs", json=_spec_json(spec), headers=headers)

    def preview(self, spec: JobSpec | dict[str, Any]) -> Preview:
        """Where `spec` would start now, or why it would wait; nothing is queued."""
        answer = self.http.json(
            "POST", "/v1/jobs", json=_spec_json(spec), params={"dry_run": "true"}
        )
        return Preview.model_validate(answer)

    def rerun(self, job_id: int, changes: dict[str, Any] | None = None) -> Job:
        """Queues job `job_id` again: its spec, so its snapshot (the same code), with
        `changes` merged in (`{"resources": {"gpus": 2}}`; None removes a field)."""
        return self._job("POST", f"/v1/jobs/{job_id}/rerun", json=changes or {})

    def get(self, job_id: int) -> Job:
        """The job now."""
        return self._job("GET", f"/v1/jobs/{job_id}")

    def jobs(
        self, *, status: list[JobStatus] | None = None, owner: str | None = None, limit: int = 50
    ) -> list[Job]:
        """The newest `limit` jobs (at most 500), optionally only these states or owner."""
        params: dict[str, Any] = {"limit": limit, "status": [str(s) for s in status or []]}
        if owner:
            params["owner"] = owner
        page = self.http.json("GET", "/v1/jobs", params=params)
        return [Job.model_validate(j) for j in page["jobs"]]

    def wait(self, job_id: int, timeout_s: float | None = None) -> Job:
        """The job once it has ended, by long polls; `TimeoutError` after `timeout_s`."""
        *_, final = self.http.changes(job_id, timeout_s)
        return Job.model_validate(final)

    def logs(self, job_id: int, tail: int | None = None) -> str:
        """The current attempt's output (stdout and stderr); `tail`: only the last lines."""
        params = {"tail": tail} if tail else {}
        return self.http.request("GET", f"/v1/jobs/{job_id}/logs", params=params).text

    def follow_logs(self, job_id: int, tail: int | None = None) -> Iterator[str]:
        """The current attempt's output as it comes, until the job ends (`gpuq logs -f`)."""
        params: dict[str, Any] = {"follow": "true"} | ({"tail": tail} if tail else {})
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for chunk in self.http.stream(f"/v1/jobs/{job_id}/logs", **params):
            if text := decoder.decode(chunk):
                yield text
        if rest := decoder.decode(b"", final=True):
            yield rest

    def cancel(self, job_id: int) -> Job:
        """Cancels a queued job at once; a running one is stopping when this returns."""
        return self._job("POST", f"/v1/jobs/{job_id}/cancel")

    def hold(self, job_id: int) -> Job:
        """Keeps a queued job from starting until `release`."""
        return self._job("POST", f"/v1/jobs/{job_id}/hold")

    def release(self, job_id: int) -> Job:
        """Lets a held job start again."""
        return self._job("POST", f"/v1/jobs/{job_id}/release")

    def set_priority(self, job_id: int, priority: int) -> Job:
        """Changes a job's priority: admins freely, its owner only downwards."""
        return self._job("PATCH", f"/v1/jobs/{job_id}", json={"priority": priority})

    def artifacts(self, job_id: int, attempt: int | None = None) -> list[Artifact]:
        """The files the job's latest (or given) attempt left."""
        params = {"attempt": attempt} if attempt else {}
        listing = self.http.json("GET", f"/v1/jobs/{job_id}/artifacts", params=params)
        return [Artifact.model_validate(a) for a in listing["artifacts"]]

    def download(
        self,
        job_id: int,
        name: str,
        path: str | Path | None = None,
        *,
        attempt: int | None = None,
    ) -> Path:
        """Saves the artifact `name` to `path` (default: its base name in the current
        folder; a folder: that name inside it) and returns where it went."""
        target = Path(path) if path is not None else Path(name.rsplit("/", 1)[-1])
        if target.is_dir():
            target = target / name.rsplit("/", 1)[-1]
        params = {"attempt": attempt} if attempt else {}
        self.http.download(f"/v1/jobs/{job_id}/artifacts/{name}", target, **params)
        return target

    def submit_sweep(
        self, spec: SweepSpec | dict[str, Any], *, idempotency_key: str | None = None
    ) -> "Sweep":
        """Queues every member of a sweep (a job spec with a `sweep` section) at once."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._sweep("POST", "/v1/sweeps", json=_spec_json(spec), headers=headers)

    def sweep(self, sweep_id: int) -> "Sweep":
        """The sweep now, with its leaderboard (`members`, the best first)."""
        return self._sweep("GET", f"/v1/sweeps/{sweep_id}")

    def sweeps(self, *, owner: str | None = None, limit: int = 50) -> list["Sweep"]:
        """The newest `limit` sweeps (at most 500), without leaderboards (`members` is
        empty: `sweep(id)` has it)."""
        params: dict[str, Any] = {"limit": limit} | ({"owner": owner} if owner else {})
        page = self.http.json("GET", "/v1/sweeps", params=params)
        return [Sweep.model_validate(s) for s in page["sweeps"]]

    def rerun_sweep(self, sweep_id: int) -> "Sweep":
        """Queues again each point whose latest member failed or was stopped early: the
        same spec (the same snapshot) and parameters, as new members of the sweep."""
        return self._sweep("POST", f"/v1/sweeps/{sweep_id}/rerun")

    def cancel_sweep(self, sweep_id: int) -> "Sweep":
        """Cancels the queued members; the running ones are stopping when this returns."""
        return self._sweep("POST", f"/v1/sweeps/{sweep_id}/cancel")

    def hold_sweep(self, sweep_id: int) -> "Sweep":
        """Keeps the sweep's queued members from starting (running ones go on)."""
        return self._sweep("POST", f"/v1/sweeps/{sweep_id}/hold")

    def release_sweep(self, sweep_id: int) -> "Sweep":
        """Lets a held sweep's queued members start again."""
        return self._sweep("POST", f"/v1/sweeps/{sweep_id}/release")

    def terminal(self, job_id: int, timeout_s: float | None = None) -> "ClientConnection":
        """A WebSocket to session `job_id`'s terminal once it runs (long polls until then;
        `TimeoutError` after `timeout_s`; `ApiError`, 409, if it ended first); use it in a
        `with`. A session is a job of `"kind": "session"`. Binary messages are keys and what
        the program shows; a text `{"rows": R, "cols": C}` sizes its terminal. It closes when
        the program ends; closing it ends the session, and gpuq refuses with close code
        4000 + an HTTP status. `gpuq shell` is built on it."""
        for job in self.http.changes(job_id, timeout_s):
            if job["status"] == JobStatus.running:
                return self.http.terminal(job_id)
        message = f"409: job {job_id} is {job['status']}: only a running session has a terminal"
        raise ApiError(message, 409)

    def has_snapshot(self, sha256: str) -> bool:
        """Whether gpuq holds snapshot `sha256` for you (uploading it would cost nothing)."""
        try:
            self.http.request("HEAD", f"/v1/snapshots/{sha256}")
        except ApiError as exc:
            if exc.status_code == 404:
                return False
            raise
        return True

    def upload_snapshot(self, tar: Path, sha256: str | None = None) -> dict[str, Any]:
        """Stores a project's snapshot (a tar, as `gpuq.snapshots.snapshot_to_file` writes
        one) for jobs to name in `command.snapshot`; its `sha256`, if given, is checked."""
        params = {"sha256": sha256} if sha256 else {}
        with tar.open("rb") as body:
            answer: dict[str, Any] = self.http.json(
                "POST",
                "/v1/snapshots",
                content=body,
                params=params,
                headers={"Content-Type": "application/x-tar"},
            )
        return answer

    def snapshot_tar(self, sha256: str, target: Path) -> int:
        """Saves one of your snapshots' tar at `target`; its size."""
        return self.http.download(f"/v1/snapshots/{sha256}/tar", target)

    def usage(
        self,
        *,
        since: str | None = None,
        until: str | None = None,
        by: Literal["owner", "day", "gpu"] = "owner",
    ) -> dict[str, Any]:
        """GPU-hours, jobs by final state, lost GPU-hours and queue waits over a period
        (`since`/`until`: `7d`, `now`, an ISO time; default the last 7 days), a row per
        `by`; the report as the API gives it (`GET /v1/usage`), as a dict."""
        given = {"since": since, "until": until}
        params = {"by": by} | {k: v for k, v in given.items() if v is not None}
        report: dict[str, Any] = self.http.json("GET", "/v1/usage", params=params)
        return report

    def reserve(
        self,
        name: str,
        starts_at: datetime,
        *,
        gpus: int | None = None,
        gpu_ids: list[int] | None = None,
        duration_s: float | None = None,
        ends_at: datetime | None = None,
        users: list[str] | None = None,
        group: str | None = None,
        cpus: float | None = None,
        host_memory_mb: int | None = None,
    ) -> dict[str, Any]:
        """Books `gpus` GPUs (or `gpu_ids`) from `starts_at` (aware) for `duration_s` (or
        until `ends_at`) for `users` (default you) and `group`; the reservation, as a dict."""
        given = {
            "name": name,
            "starts_at": starts_at.isoformat(),
            "gpus": gpus,
            "gpu_ids": gpu_ids,
            "duration_s": duration_s,
            "ends_at": ends_at.isoformat() if ends_at else None,
            "users": users,
            "group": group,
            "cpus": cpus,
            "host_memory_mb": host_memory_mb,
        }
        body = {k: v for k, v in given.items() if v is not None}
        booked: dict[str, Any] = self.http.json("POST", "/v1/reservations", json=body)
        return booked

    def reservations(self, *, everything: bool = False) -> list[dict[str, Any]]:
        """The reservations open or to come (`everything`: ended and released ones too)."""
        listed: list[dict[str, Any]] = self.http.json(
            "GET", "/v1/reservations", params={"all": everything}
        )
        return listed

    def reservation(self, key: int | str) -> dict[str, Any]:
        """One reservation, by id or name."""
        shown: dict[str, Any] = self.http.json("GET", f"/v1/reservations/{key}")
        return shown

    def change_reservation(self, key: int | str, **changes: Any) -> dict[str, Any]:
        """Moves a reservation's window or changes its users (`starts_at`, `ends_at`,
        `duration_s`, `users`, `group`); its owner or an admin."""
        body = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in changes.items()}
        changed: dict[str, Any] = self.http.json("PATCH", f"/v1/reservations/{key}", json=body)
        return changed

    def delete_reservation(self, key: int | str) -> dict[str, Any]:
        """Ends a reservation now; its owner or an admin."""
        ended: dict[str, Any] = self.http.json("DELETE", f"/v1/reservations/{key}")
        return ended

    def me(self) -> Me:
        """You, as the server knows you: your name, and whether you are an admin."""
        return Me.model_validate(self.http.json("GET", "/v1/me"))

    def gpus(self) -> list[dict[str, Any]]:
        """Every GPU with its memory, jobs and state, as dicts as the API gives them
        (`GET /v1/gpus`); under Slurm, the partition's GPU nodes instead."""
        listed: list[dict[str, Any]] = self.http.json("GET", "/v1/gpus")
        return listed

    def release_gpu(self, index: int) -> dict[str, Any]:
        """Puts a draining or quarantined GPU back into use (admins); the GPU, as a dict."""
        gpu: dict[str, Any] = self.http.json("POST", f"/v1/gpus/{index}/release")
        return gpu

    def drains(self) -> list["Drain"]:
        """What is drained: the whole box (`gpu` None) or single GPUs."""
        return self._drains("GET", "/v1/admin/drain")

    def drain(self, gpus: list[int] | None = None, reason: str | None = None) -> list["Drain"]:
        """Starts nothing new on `gpus` (None: the whole box) until `resume`; running jobs
        finish (admins). Every drain now."""
        return self._drains("POST", "/v1/admin/drain", json={"gpus": gpus, "reason": reason})

    def resume(self, gpus: list[int] | None = None) -> list["Drain"]:
        """Ends the drains of `gpus` (None: every drain) (admins); the drains left."""
        return self._drains("POST", "/v1/admin/resume", json={"gpus": gpus})

    def audit(self, *, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """A page of the audit log, newest first (admins), as the API gives it: `entries`
        and `next_cursor`, the `cursor` of the next page (None on the last)."""
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        page: dict[str, Any] = self.http.json("GET", "/v1/audit", params=params)
        return page

    def webhook(self) -> "Webhook":
        """Your default webhook and the secret your jobs' deliveries are signed with."""
        return Webhook.model_validate(self.http.json("GET", "/v1/webhook"))

    def set_webhook(self, url: str | None, *, rotate_secret: bool = False) -> "Webhook":
        """Sets your default webhook (None: removes it); jobs already queued keep theirs."""
        change = {"url": url, "rotate_secret": rotate_secret}
        return Webhook.model_validate(self.http.json("PUT", "/v1/webhook", json=change))

    def rotate_webhook_secret(self) -> "Webhook":
        """Replaces the signing secret, leaving the webhook as it is."""
        change = {"rotate_secret": True}
        return Webhook.model_validate(self.http.json("PUT", "/v1/webhook", json=change))

    def close(self) -> None:
        """Closes the connections."""
        self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _job(self, method: str, path: str, **kwargs: Any) -> Job:
        return Job.model_validate(self.http.json(method, path, **kwargs))

    def _sweep(self, method: str, path: str, **kwargs: Any) -> "Sweep":
        return Sweep.model_validate(self.http.json(method, path, **kwargs))

    def _drains(self, method: str, path: str, **kwargs: Any) -> list["Drain"]:
        return [Drain.model_validate(d) for d in self.http.json(method, path, **kwargs)]


class SweepMember(_Answer):
    """A row of a sweep's leaderboard."""

    job_id: int
    params: dict[str, Any] = Field(default_factory=dict)
    status: JobStatus
    reason: Reason | None = None  #: `early_stopped` if the stopping rule stopped it
    epochs: int = 0
    best: float | None = None  #: its best value of the sweep's metric
    last: float | None = None
    rank: int | None = None  #: 1 for the best; None before it has a value


class Sweep(_Answer):
    """A sweep as the server last reported it (`GET /v1/sweeps/{id}`)."""

    id: int
    name: str
    owner: str
    status: str  #: queued, running, ended or cancelled
    size: int
    counts: dict[str, int] = Field(default_factory=dict)  #: members by state
    metric: str | None = None
    mode: str = "min"
    max_parallel: int | None = None
    held: bool = False  #: its queued members are held until `release_sweep`
    warnings: list[str] = Field(default_factory=list)
    members: list[SweepMember] = Field(default_factory=list)  #: the best first

    @property
    def done(self) -> bool:
        """Every member has ended."""
        return self.status in ("ended", "cancelled")


class Drain(_Answer):
    """An admin's maintenance drain: nothing new starts there until it is resumed."""

    gpu: int | None = None  #: None: the whole box
    reason: str | None = None
    by: str
    since: datetime


class Webhook(_Answer):
    """Your default webhook, for jobs whose spec names none, and your signing secret."""

    url: str | None = None
    secret: str  #: `X-Gpuq-Signature: sha256=<hex>` is HMAC-SHA256 of the body with it
