"""The audit log as the API shows it."""

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from service.usage.public import described


class AuditPublic(BaseModel):
    id: int = described("Entry id, increasing.")
    at: datetime = described("When (UTC).")
    actor: str = described("Who did it.")
    action: str = described("What: submit, cancel, hold, release, priority, gpu_release, ...")
    target: str = described("What it was done to: `job/7`, `gpu/0`, `user/ana`.")
    detail: dict[str, Any] = described("More about it, e.g. the old and new priority.")


class AuditPage(BaseModel):
    entries: list[AuditPublic] = described("Newest first.")
    next_cursor: str | None = described("Pass as `cursor` for the next page; null on the last.")
