"""A sweep spec's members: the points (`grid`, `list`, `random`), each put into a copy of the
base spec and checked as a job spec of its own. Pure: no database, no clock."""

import itertools
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue, ValidationError

from gpuq.contract.spec import JobSpec
from gpuq.contract.sweep import PLACEHOLDER, Range, SweepSection, SweepSpec, is_path, param_text
from service.errors import Invalid

Point = dict[str, JsonValue]
Loc = tuple[str | int, ...]
#: how the warning about a metric builtin members do not report begins
UNREPORTED = "no member reports the metric"


@dataclass(frozen=True)
class Member:
    params: Point  #: parameter → its value for this member
    spec: JobSpec  #: the member's own spec, its parameters put in


@dataclass(frozen=True)
class Expansion:
    members: list[Member]
    seed: int | None  #: the random search's seed (the one given, or the one drawn)
    warnings: list[str]


def member_count(section: SweepSection) -> int:
    """How many members the section makes, counted without making them."""
    if section.search == "grid":
        return math.prod(len(v) for v in section.parameters.values() if isinstance(v, list))
    if section.search == "list":
        return len(section.points)
    assert section.samples is not None
    return section.samples


def expand(spec: SweepSpec, *, limit: int, seed: int) -> Expansion:
    """The members of `spec`, in order; `seed` draws a random search that names none.

    `Invalid` (422) for more than `limit` members, or a parameter the spec cannot take."""
    section = spec.sweep
    where = ("body", "sweep", "points" if section.search == "list" else "parameters")
    if spec.kind == "session":
        raise Invalid(("body", "kind"), "a sweep's members are batch jobs: kind keras or command")
    bare = [n for n in section.names if not is_path(n)]
    if bare and spec.kind != "command":
        raise Invalid(
            (*where, bare[0]),
            "a keras sweep varies spec fields by their path, e.g. keras.learning_rate; bare "
            "names are for a command job's argv ({name}) and environment",
        )
    count = member_count(section)
    if count > limit:
        raise Invalid(
            ("body", "sweep"),
            f"this sweep would make {count} jobs; this gpuq allows at most {limit} in one "
            "sweep (GPUQ_MAX_SWEEP_JOBS)",
        )
    if section.search == "random" and section.seed is not None:
        seed = section.seed
    base = spec.job_spec().model_dump(mode="json")
    members = [
        _make_member(base, point, i, where) for i, point in enumerate(_points(section, seed))
    ]
    warnings = _placeholder_warnings(base, section.names)
    if section.metric is not None:
        warnings += _metric_warnings([m.spec for m in members], section.metric)
    return Expansion(members, seed if section.search == "random" else None, warnings)


def _points(section: SweepSection, seed: int) -> Iterator[Point]:
    if section.search == "list":
        yield from section.points
        return
    names = list(section.parameters)
    if section.search == "grid":
        lists: list[list[JsonValue]] = [list(section.parameters[n]) for n in names]  # type: ignore[arg-type]
        for values in itertools.product(*lists):
            yield dict(zip(names, values, strict=True))
        return
    rng = random.Random(seed)
    assert section.samples is not None
    for _ in range(section.samples):
        yield {n: _draw(rng, section.parameters[n]) for n in names}


def _draw(rng: random.Random, domain: Sequence[JsonValue] | Range) -> JsonValue:
    if not isinstance(domain, Range):
        return rng.choice(list(domain))
    if domain.scale == "log":
        value = math.exp(rng.uniform(math.log(domain.low), math.log(domain.high)))
    else:
        value = rng.uniform(domain.low, domain.high)
    if domain.integer:
        return min(max(round(value), math.ceil(domain.low)), math.floor(domain.high))
    return float(f"{value:.4g}")  # 0.0031622776601683794 reads as 0.003162


def _make_member(base: Mapping[str, Any], point: Point, index: int, where: Loc) -> Member:
    body = json.loads(json.dumps(base))  # a deep copy, cheaply
    body["name"] = f"{base['name'][:120]}-{index + 1}"
    for name, value in point.items():
        if is_path(name):
            _set_field(body, name, value, (*where, name))
    if body.get("command") is not None:
        bare = {n: param_text(v) for n, v in point.items() if not is_path(n)}
        body["command"]["argv"] = [
            PLACEHOLDER.sub(lambda m: bare.get(m.group(1), m.group(0)), part)
            for part in body["command"]["argv"]
        ]
    try:
        spec = JobSpec.model_validate(body)
    except ValidationError as exc:
        raise _member_error(exc, point, index, where) from None
    return Member(dict(point), spec)


def _set_field(body: dict[str, Any], path: str, value: JsonValue, loc: Loc) -> None:
    *parents, leaf = path.split(".")
    here: Any = body
    for depth, part in enumerate(parents):
        here = here.get(part) if isinstance(here, dict) else None
        if not isinstance(here, dict):
            where = ".".join(parents[: depth + 1])
            raise Invalid(loc, f"this job's spec has no section {where!r}")
    if leaf not in here:
        known = ", ".join(sorted(here))
        raise Invalid(loc, f"{leaf!r} is not a field of {'.'.join(parents)} (it has {known})")
    here[leaf] = value


def _member_error(exc: ValidationError, point: Point, index: int, where: Loc) -> Invalid:
    """The first problem of a member's spec, at the parameter that caused it if one did."""
    error = exc.errors(include_url=False, include_input=False)[0]
    field = ".".join(str(p) for p in error["loc"])
    culprit = next(
        (n for n in point if is_path(n) and (field == n or field.startswith(n + "."))), None
    )
    said = ", ".join(f"{n}={param_text(v)}" for n, v in point.items())
    message = f"member {index + 1} ({said}): {field or 'spec'}: {error['msg']}"
    loc = (*where, culprit) if culprit else ("body", *error["loc"])
    return Invalid(loc, message)


def _placeholder_warnings(base: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """`{name}`s in a command's argv that no parameter fills: left as they are, and said."""
    command = base.get("command")
    if not command:
        return []
    bare = {n for n in names if not is_path(n)}
    unknown = sorted({m for part in command["argv"] for m in PLACEHOLDER.findall(part)} - bare)
    return [
        f"argv has {{{name}}}, which is no parameter of this sweep: left as it is"
        for name in unknown
    ]


def reported_metrics(spec: JobSpec) -> set[str] | None:
    """The epoch metrics a builtin job reports; None for a program, which reports its own."""
    if spec.keras is None:
        return None
    names = {"loss", *(str(m) for m in spec.keras.metrics)}
    if spec.keras.validation_split > 0:
        names |= {f"val_{n}" for n in names}
    return names


def _metric_warnings(specs: Sequence[JobSpec], metric: str) -> list[str]:
    """A metric no builtin member reports: the leaderboard ranks nothing and no member is
    stopped early. Said, not refused: the sweep still runs."""
    known: set[str] = set()
    for spec in specs:
        names = reported_metrics(spec)
        if names is None:
            return []
        known |= names
    if metric in known:
        return []
    return [
        f"{UNREPORTED} {metric!r} (they report {', '.join(sorted(known))}): "
        "the leaderboard ranks nothing and early stopping never acts"
    ]
