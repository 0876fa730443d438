"""The jobs domain: submitting, reading, acting on jobs, and every write to a job row
(`writes`, beside the one gate for status, `transition`)."""

from service.jobs.actions import cancel_job, set_held, set_priority
from service.jobs.reads import get_job, list_jobs, metric_history, read_job, read_revision
from service.jobs.submission import Limits
from service.jobs.writes import cancel_queued, transition

__all__ = [
    "Limits",
    "cancel_job",
    "cancel_queued",
    "get_job",
    "list_jobs",
    "metric_history",
    "read_job",
    "read_revision",
    "set_held",
    "set_priority",
    "transition",
]
