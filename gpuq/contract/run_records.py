"""What the service accepts of `exit.json`, the record a runner leaves in a job's run folder
of how the job ended. (`runner.json`, the runner's pids, is for people: gpuq never reads
it, and finds a runner it has no record of by its session and folder.)

The runner runs as the job's owner, and so can anything the owner starts: these files are
the job's words until they fit a model here, with known fields only and every value
bounded. One that does not fit is no record at all (`parse_exit`).
`worker.runner`, `worker.session` and `nodes.job_end` write it and stay stdlib-only for
a job's start; this is the service's side, as `event_records` is for `events.jsonl`.
"""

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuq.contract.event_records import HostName, Text
from gpuq.contract.spec import MAX_NODES

#: Linux's PID_MAX_LIMIT: no pid is larger. Pid 1 is init, never a runner.
Pid = Annotated[int, Field(ge=2, le=4_194_304)]
#: Clock ticks since boot (`processes.process_start_ticks`).
Ticks = Annotated[int, Field(ge=0, le=2**63 - 1)]
#: A wall-clock time (`time.time()`).
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: Why the program could not start: its argv[0] (up to 4096 characters, repr'd) and the
#: error, with room to spare.
MAX_SPAWN_ERROR_CHARS = 20_000


class _RunRecord(BaseModel):
    # Strict and closed: a field gpuq never writes, or "0" for 0, means someone else wrote it.
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


class ExitRecord(_RunRecord):
    """`exit.json`: how the job's program ended (`worker.runner_records.end_with`), or, on
    several nodes, the node that ended it (`nodes.job_end`)."""

    exit_code: Annotated[int, Field(ge=0, le=255)] | None = None  #: None: a signal ended it
    signal: Annotated[int, Field(ge=0, le=255)] | None = None
    finished_at: Seconds | None = None
    #: the runner could not start the program (`outcome` quotes it as the job's words)
    spawn_error: Annotated[Text, Field(min_length=1, max_length=MAX_SPAWN_ERROR_CHARS)] | None = (
        None
    )
    oom_killed: bool = False  #: the kernel's OOM killer struck while it ran
    terminal_closed: bool = False  #: a session whose terminal went away
    nodes: Annotated[int, Field(ge=1, le=MAX_NODES)] | None = None
    #: the node to blame, as it announced itself; absent when it never did
    node: HostName | None = None
    node_rank: Annotated[int, Field(ge=0, lt=MAX_NODES)] | None = None
    node_lost: bool = False  #: that node's gpuq worker left no end

    @property
    def on_node(self) -> bool:
        """Whether one node of several ended the job (then it is judged as that node's)."""
        return self.node is not None or self.node_rank is not None


def parse_exit(data: Mapping[str, Any] | None) -> tuple[ExitRecord | None, str | None]:
    """`exit.json`'s content (as `rundir.read_json` read it) as a record, and what is wrong
    with it in a few words that never quote its values (the job chose them): (None, None)
    when there is none, (None, why) when it breaks the contract."""
    if data is None:
        return None, None
    try:
        return ExitRecord.model_validate(data), None
    except ValidationError as exc:
        return None, _exit_problem(exc)


def exit_record(data: Mapping[str, Any] | None) -> ExitRecord | None:
    """`exit.json`'s content as a record; None if there is none or it breaks the contract."""
    return parse_exit(data)[0]


def _exit_problem(exc: ValidationError) -> str:
    """The first error of a validation, by where and what: never a value, nor the name of a
    field gpuq does not write (the job chose both)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    if error["type"] == "extra_forbidden":
        return "a field gpuq never writes"
    where = ".".join(str(part)[:40] for part in error["loc"]) or "record"
    return f"{where}: {error['msg']}"
