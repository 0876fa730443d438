"""The field types every part of the job spec shares: strict models, host paths, webhook
URLs, moments in UTC, and the spec's limits."""

from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
)

#: a sha256 as gpuq writes one: 64 lowercase hex digits (snapshots, diffs, lock files)
SHA256 = r"^[0-9a-f]{64}$"
MAX_GPUS = 64
#: the most machines one job may span (`resources.nodes`)
MAX_NODES = 64


# Pydantic inspects a field's default factory each time it builds a default, and a
# builtin's signature (`list`, `dict`) is parsed from text every time: about 0.25 ms per
# field, several per job row. A plain function is inspected in microseconds.
def empty_list() -> list[Any]:
    return []


def empty_dict() -> dict[str, Any]:
    return {}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


def check_host_path(value: str) -> str:
    """`value`, if it may name a path on the gpuq host; a `ValueError` saying why not."""
    if "\0" in value:
        raise ValueError("must not contain NUL characters")
    if ".." in value.split("/"):  # a `..` segment, as `PurePosixPath(value).parts` has it
        raise ValueError("must not contain '..' segments; give the real absolute path")
    return value


#: A path on the gpuq host: no NUL bytes, no `..` tricks (checked for existence at submit).
HostPath = Annotated[str, Field(min_length=1, max_length=4096), AfterValidator(check_host_path)]


def _web_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


#: Where a webhook is posted.
WebUrl = Annotated[str, Field(min_length=8, max_length=2048), AfterValidator(_web_url)]


def _in_utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


#: A moment with its time zone (ISO 8601, e.g. `2026-11-23T18:00:00Z`), kept in UTC.
UtcTime = Annotated[AwareDatetime, Field(strict=False), AfterValidator(_in_utc)]
