"""The job spec `gpuq run` and `gpuq shell` build from where the caller stands: their
program found on their `PATH`, their folder, the part of their environment a program
needs to behave as in their shell, and the options, each one spec field.
"""

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuq.contract.spec import RESERVED_ENV, JobSpec

#: What travels from the caller's environment, by name: where their programs and Python
#: packages are, and their language. Never the GPU variables, never `GPUQ_*`, never a
#: token or a key they did not name with `--env`.
TRAVELS = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH")
TRAVELS_PREFIXED = ("LANG", "LANGUAGE", "LC_")
#: and for a session, what the terminal is
TRAVELS_TO_SESSIONS = ("TERM", "COLORTERM")

#: spec field -> the option that sets it, to name it when the spec refuses a value
OPTIONS = {
    ("name",): "--name",
    ("priority",): "--priority",
    ("depends_on",): "--after",
    ("time_limit_s",): "--time",
    ("not_before",): "--not-before",
    ("idle_exempt",): "--idle-exempt",
    ("max_retries",): "--retries",
    ("preemptible",): "--preemptible",
    ("reservation",): "--reservation",
    ("resources", "gpus"): "--gpus",
    ("resources", "nodes"): "--nodes",
    ("resources", "gpu_ids"): "--gpu-ids",
    ("resources", "memory_mb"): "--mem",
    ("resources", "cpus"): "--cpus",
    ("resources", "host_memory_mb"): "--host-mem",
    ("command", "env"): "--env",
    ("command", "argv"): "PROGRAM",
    ("command", "workdir"): "the current folder",
    ("resources",): "--gpus",  # the GPUs asked for disagree with each other
    ("sweep",): "--sweep",  # a sweep's own options are checked before it is sent
}


def option_for(loc: Sequence[object]) -> str | None:
    """The option that sets the spec field at `loc` (its path in the spec); None if none
    does."""
    path = tuple(str(part) for part in loc)
    return next((o for f, o in OPTIONS.items() if path[: len(f)] == f), None)


class BadOption(ValueError):
    """A value the spec refuses; `option` names what the user typed it as."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass
class RunOptions:
    """The options of `gpuq run` and `gpuq shell`, as typed (units already read)."""

    gpus: int | None = None
    nodes: int | None = None
    gpu_ids: list[int] | None = None
    mem_mb: int | None = None
    cpus: float | None = None
    host_memory_mb: int | None = None
    time_s: float | None = None
    name: str | None = None
    priority: int | None = None
    after: list[int] = field(default_factory=list)
    retries: int | None = None
    not_before: datetime | None = None
    idle_exempt: str | None = None
    env: list[str] = field(default_factory=list)
    preemptible: bool | None = None
    reservation: str | None = None


def travelling(environ: Mapping[str, str], *, session: bool) -> dict[str, str]:
    """The variables that travel from `environ` without being named."""
    names = TRAVELS + (TRAVELS_TO_SESSIONS if session else ())
    return {
        k: v
        for k, v in environ.items()
        if k in names or (k.startswith(TRAVELS_PREFIXED) and k.isidentifier())
    }


def named(values: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`--env K=V` as given, `--env K` from `environ`."""
    env = {}
    for value in values:
        key, sep, given = value.partition("=")
        if key in RESERVED_ENV or key.startswith("GPUQ_"):
            raise BadOption("--env", f"{key} is gpuq's to set for the job")
        if not sep:
            if key not in environ:
                raise BadOption("--env", f"{key} is not set here: write {key}=VALUE")
            given = environ[key]
        env[key] = given
    return env


def program_path(program: str, path: str | None) -> str:
    """`program` as found on the caller's `path`, absolute; a path as given."""
    if "/" in program:
        return os.path.abspath(program)
    found = shutil.which(program, path=path)
    if found is None:
        raise BadOption("PROGRAM", f"{program!r} is not on your PATH")
    return os.path.abspath(found)


def default_name(argv: Sequence[str]) -> str:
    """`train.py` for `python train.py`, `bash` for `bash`: the script an interpreter runs,
    else the program; only the characters a name may have."""
    word = Path(argv[0]).name
    interpreter = re.match(r"^(python[\d.]*|bash|sh|zsh|node|Rscript|julia)$", word)
    if interpreter and len(argv) > 1 and not argv[1].startswith("-"):
        word = Path(argv[1]).name
    name = re.sub(r"[^\w.\- ]", "_", word)[:128]
    return name or "job"


def build_spec(
    kind: str,
    argv: Sequence[str],
    options: RunOptions,
    *,
    cwd: str,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """The spec, checked by the contract's own model; `BadOption` names the option of a
    value it refuses."""
    env = travelling(environ, session=kind == "session") | named(options.env, environ)
    command = {
        "argv": [program_path(argv[0], env.get("PATH")), *argv[1:]],
        "workdir": cwd,
        "env": env,
    }
    resources = {
        "gpus": options.gpus,
        "nodes": options.nodes,
        "gpu_ids": options.gpu_ids,
        "memory_mb": options.mem_mb,
        "cpus": options.cpus,
        "host_memory_mb": options.host_memory_mb,
    }
    spec: dict[str, Any] = {
        "name": options.name or default_name(argv),
        "kind": kind,
        "command": command,
        "resources": {k: v for k, v in resources.items() if v is not None},
        "priority": options.priority,
        "depends_on": options.after or None,
        "time_limit_s": options.time_s,
        "not_before": options.not_before.isoformat() if options.not_before else None,
        "idle_exempt": options.idle_exempt,
        "max_retries": options.retries,
        "preemptible": options.preemptible,
        "reservation": options.reservation,
    }
    spec = {k: v for k, v in spec.items() if v is not None}
    try:
        JobSpec.model_validate(spec, strict=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        option = option_for(first["loc"]) or "the options"
        raise BadOption(option, first["msg"].removeprefix("Value error, ")) from None
    return spec
