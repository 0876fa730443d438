"""Who sees a job's webhook URL: a URL may embed a token (Slack's do)."""

from service.public import JobPublic
from service.team.users import Caller


def as_seen_by(caller: Caller, job: JobPublic) -> JobPublic:
    """`job` with `spec.webhook` blanked unless `caller` owns it or is an admin."""
    if job.spec.webhook is None or caller.manages(job.owner):
        return job
    spec = job.spec.model_copy(update={"webhook": None})
    return job.model_copy(update={"spec": spec})
