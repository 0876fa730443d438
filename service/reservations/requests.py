"""What `POST /v1/reservations` and `PATCH /v1/reservations/{id}` take."""

from datetime import datetime, timedelta
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from gpuq.contract.spec import RESERVATION_NAME
from gpuq.contract.spec_fields import MAX_GPUS
from service.team.users import NAME_PATTERN

#: the longest window one reservation may hold
MAX_DAYS = 366
UNIX_GROUP = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$"

Users = Annotated[
    list[Annotated[str, Field(pattern=NAME_PATTERN)]] | None,
    Field(
        None,
        min_length=1,
        max_length=200,
        description="Who may use it, by gpuq user name; default: whoever books it.",
    ),
]
Group = Annotated[
    str | None,
    Field(None, pattern=UNIX_GROUP, description="A Unix group whose members may use it too."),
]
Ends = Annotated[
    AwareDatetime | None,
    Field(None, description="Its end, with its zone; or give `duration_s`."),
]
Duration = Annotated[
    float | None,
    Field(None, gt=0, le=MAX_DAYS * 86400, description="Its length, from `starts_at`."),
]


class ReservationBody(BaseModel):
    """A booking: GPUs (a count, or named ones) for a window and a list of users."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=RESERVATION_NAME, description="What jobs name it by: `paper`.")
    gpus: int | None = Field(None, ge=1, le=MAX_GPUS, description="How many GPUs (gpuq picks).")
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, min_length=1, max_length=MAX_GPUS, description="Which GPUs, by index."
    )
    starts_at: AwareDatetime = Field(description="When it opens, with its zone.")
    ends_at: Ends = None
    duration_s: Duration = None
    users: Users = None
    group: Group = None
    cpus: float | None = Field(
        None, gt=0, le=4096, description="Cores of the box others leave free in the window."
    )
    host_memory_mb: int | None = Field(
        None, ge=1, le=2**40, description="Host memory (MiB) others leave free in the window."
    )

    @model_validator(mode="after")
    def _check(self) -> "ReservationBody":
        if (self.gpus is None) == (self.gpu_ids is None):
            raise ValueError("give `gpus` (how many) or `gpu_ids` (which), one of them")
        if self.gpu_ids is not None and len(set(self.gpu_ids)) != len(self.gpu_ids):
            raise ValueError("`gpu_ids` names a GPU twice")
        window_of(self.starts_at, self.ends_at, self.duration_s)
        return self

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_ids) if self.gpu_ids is not None else self.gpus or 0


class ReservationChange(BaseModel):
    """What may change of a reservation: its window and its users."""

    model_config = ConfigDict(extra="forbid")

    starts_at: AwareDatetime | None = Field(None, description="A new opening.")
    ends_at: Ends = None
    duration_s: Duration = None
    users: Users = None
    group: Group = None

    @model_validator(mode="after")
    def _check(self) -> "ReservationChange":
        if self.ends_at is not None and self.duration_s is not None:
            raise ValueError("give `ends_at` or `duration_s`, not both")
        if not self.model_fields_set:
            raise ValueError(
                "nothing to change: give starts_at, ends_at, duration_s, users or group"
            )
        return self


def window_of(
    starts_at: datetime, ends_at: datetime | None, duration_s: float | None
) -> tuple[datetime, datetime]:
    """The window `[starts_at, ends)` from an end or a length; `ValueError` naming the
    field if it is none, or empty, or too long."""
    if (ends_at is None) == (duration_s is None):
        raise ValueError("give `ends_at` or `duration_s`, one of them")
    ends = ends_at if ends_at is not None else starts_at + timedelta(seconds=duration_s or 0)
    if ends <= starts_at:
        raise ValueError("`ends_at` must come after `starts_at`")
    if ends - starts_at > timedelta(days=MAX_DAYS):
        raise ValueError(f"a reservation holds at most {MAX_DAYS} days")
    return starts_at, ends
