"""A sweep: many runs of one experiment. The body of `POST /v1/sweeps` is a job spec with a
`sweep` section saying what varies, how the points are chosen, how many members run at
once, which metric ranks them, and when a hopeless one is stopped.

What varies is named two ways: a spec field by its dotted path (`keras.learning_rate`,
`resources.memory_mb`), set in each member's spec; or, for command jobs, a bare name
(`lr`) put into the argv wherever it says `{lr}` and given as `GPUQ_PARAM_LR`. Checks that
need the expanded members (a path the spec lacks, a value its field refuses, too many
members) are the service's (`service.sweeps.expand`).
"""

import json
import math
import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import Discriminator, Field, JsonValue, Tag, model_validator

from gpuq.contract.spec import JobSpec, StrictModel

#: a spec path (`keras.learning_rate`) or, for command jobs, a bare name (`lr`)
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
ParamName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=128)]
#: where a command job's argv takes a bare parameter: `{lr}`
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: at most this many members in any sweep, whatever the site allows (GPUQ_MAX_SWEEP_JOBS)
MAX_MEMBERS = 100_000


def is_path(name: str) -> bool:
    """Whether a parameter names a spec field (`keras.seed`) rather than a bare name."""
    return "." in name


def env_name(name: str) -> str:
    """The variable a member gets its parameter in: `lr` → `GPUQ_PARAM_LR`,
    `keras.learning_rate` → `GPUQ_PARAM_KERAS_LEARNING_RATE`."""
    return "GPUQ_PARAM_" + name.replace(".", "_").upper()


def param_text(value: JsonValue) -> str:
    """A parameter's value as a member's argv and environment get it: strings as they are,
    numbers and the rest as JSON (`0.001`, `32`, `true`, `[64, 32]`)."""
    return value if isinstance(value, str) else json.dumps(value)


def param_environment(params: Mapping[str, JsonValue]) -> dict[str, str]:
    """`GPUQ_PARAM_<NAME>` for each of a sweep member's parameters."""
    return {env_name(name): param_text(value) for name, value in params.items()}


class Range(StrictModel):
    """Values drawn at random between `low` and `high` (`search: random` only)."""

    low: float = Field(description="The smallest value.")
    high: float = Field(description="The largest value.")
    scale: Literal["linear", "log"] = Field(
        "linear",
        description="`log` draws log-uniformly (learning rates: as many between 1e-4 and 1e-3 "
        "as between 1e-3 and 1e-2); `linear` uniformly.",
    )
    integer: bool = Field(False, description="Round each value to a whole number.")

    @model_validator(mode="after")
    def _check(self) -> "Range":
        if self.low > self.high:
            raise ValueError(f"low ({self.low:g}) is above high ({self.high:g})")
        if self.scale == "log" and self.low <= 0:
            raise ValueError("a log-scale range needs low above 0")
        if self.integer and math.ceil(self.low) > math.floor(self.high):
            raise ValueError(f"no whole number lies between {self.low:g} and {self.high:g}")
        return self


Values = Annotated[list[JsonValue], Field(min_length=1, max_length=10_000)]
#: a list of values, or (an object) a range: errors name the one the value looks like
Domain = Annotated[
    Annotated[Values, Tag("list")] | Annotated[Range, Tag("range")],
    Discriminator(lambda value: "range" if isinstance(value, dict | Range) else "list"),
]


class EarlyStopping(StrictModel):
    """The median stopping rule: after epoch k ≥ `grace_epochs`, a running member whose best
    value so far is worse than the median of the other members' values at epoch k (at least
    `min_members` of them) is stopped: `cancelled`, reason `early_stopped`."""

    rule: Literal["median"] = Field("median", description="The stopping rule.")
    grace_epochs: int = Field(
        2, ge=1, le=100_000, description="No member is judged before it has run this many epochs."
    )
    min_members: int = Field(
        2,
        ge=1,
        le=10_000,
        description="How many other members must have reached the same epoch before one is "
        "judged against them.",
    )


class SweepSection(StrictModel):
    """What varies across a sweep's members, and how they are run and ranked."""

    search: Literal["grid", "list", "random"] = Field(
        "grid",
        description="`grid`: every combination of `parameters`; `list`: the given `points`; "
        "`random`: `samples` points drawn from `parameters` (lists and ranges) with `seed`.",
    )
    parameters: dict[ParamName, Domain] = Field(
        default_factory=dict,
        max_length=64,
        description="Parameter → its values (a list), or for `random` a range.",
    )
    points: list[Annotated[dict[ParamName, JsonValue], Field(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=MAX_MEMBERS,
        description="For `search: list`: each member's parameters.",
    )
    samples: int | None = Field(
        None, ge=1, le=MAX_MEMBERS, description="For `search: random`: how many members."
    )
    seed: int | None = Field(
        None,
        ge=0,
        le=2**31 - 1,
        description="For `search: random`: the same seed draws the same members. Left out, "
        "gpuq picks one and records it in the sweep.",
    )
    max_parallel: int | None = Field(
        None,
        ge=1,
        le=MAX_MEMBERS,
        description="At most this many members run at once (Slurm's `--array=...%N`); "
        "null: as many as fit.",
    )
    metric: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="The metric that ranks members (`val_loss`, `accuracy`, ...): an epoch "
        "metric members report.",
    )
    mode: Literal["min", "max"] = Field("min", description="Whether lower or higher is better.")
    early_stopping: EarlyStopping | None = Field(
        None, description="Stop members that trail the others (needs `metric`)."
    )

    @model_validator(mode="after")
    def _check(self) -> "SweepSection":
        if self.search == "list":
            if not self.points:
                raise ValueError("search 'list' needs `points`: each member's parameters")
            if self.parameters:
                raise ValueError("search 'list' takes `points`, not `parameters`")
        else:
            if not self.parameters:
                raise ValueError(f"search {self.search!r} needs `parameters`")
            if self.points:
                raise ValueError(f"search {self.search!r} takes `parameters`, not `points`")
        ranges = sorted(n for n, v in self.parameters.items() if isinstance(v, Range))
        if ranges and self.search != "random":
            raise ValueError(
                f"{', '.join(ranges)}: a range is drawn from (search 'random'); "
                f"search {self.search!r} takes lists of values"
            )
        if (self.samples is None) == (self.search == "random"):
            raise ValueError("`samples` goes with search 'random', and only with it")
        if self.seed is not None and self.search != "random":
            raise ValueError("`seed` goes with search 'random' only")
        if self.early_stopping is not None and self.metric is None:
            raise ValueError("early_stopping needs a `metric` to compare members by")
        names = {env_name(n) for n in self.names}
        if len(names) != len(self.names):
            raise ValueError("two parameters differ only in case or dots: their variables clash")
        return self

    @property
    def names(self) -> list[str]:
        """Every parameter the sweep varies, in the order given."""
        if self.search != "list":
            return list(self.parameters)
        return list(dict.fromkeys(name for point in self.points for name in point))


class SweepSpec(JobSpec):
    """A job spec (each member's, before its parameters are put in) with a `sweep` section."""

    sweep: SweepSection = Field(description="What varies, how, and how members are ranked.")

    def job_spec(self) -> JobSpec:
        """The spec without its sweep section: what each member's starts from."""
        return JobSpec.model_validate(self.model_dump(exclude={"sweep"}))
