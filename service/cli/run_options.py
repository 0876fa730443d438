"""The options `gpuq run` and `gpuq shell` share, declared once, and the one builder that
turns them into a spec (`spec_from`): each option sets one spec field
(`run_spec.OPTIONS`); values it refuses are exit 2 naming the option."""

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer

from service.cli import run_spec, sweeps, units
from service.cli.options import JsonFlag
from service.cli.run_spec import BadOption, RunOptions
from service.cli.snapshot_upload import SnapshotFlag

T = TypeVar("T")


def read_as_option(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse`, with its `ValueError` told as the option's bad value (exit 2)."""

    def parser(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parser


def parse_gpu_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r} is not a list of GPU indices: write 0,2") from None


Program = Annotated[
    list[str] | None,
    typer.Argument(metavar="[--] PROGRAM [ARGS]...", help="What to run.", show_default=False),
]
Gpus = Annotated[int | None, typer.Option(help="How many GPUs (0: the CPU). Default 1.")]
GpuIds = Annotated[
    str | None, typer.Option("--gpu-ids", metavar="0,2", help="These GPUs (their indices).")
]
Nodes = Annotated[
    int | None,
    typer.Option(
        help="Machines to run on at once, --gpus on each (Slurm executor): every node "
        "gets TF_CONFIG and torchrun's MASTER_ADDR, RANK... Default 1."
    ),
]
Mem = Annotated[
    int | None,
    typer.Option(
        parser=read_as_option(units.mebibytes),
        metavar="SIZE",
        help="Memory cap per GPU: 8GiB, 8G, 8192M, 8192 (MiB). Default: whole GPUs.",
    ),
]
Cpus = Annotated[
    float | None,
    typer.Option(
        metavar="N",
        help="CPU cores it holds, e.g. 4 or 0.5 (per node). Default: the site's per GPU.",
    ),
]
HostMem = Annotated[
    int | None,
    typer.Option(
        "--host-mem",
        parser=read_as_option(units.mebibytes),
        metavar="SIZE",
        help="Host memory (RAM) it may use, e.g. 32G (per node); past it the kernel stops "
        "it. Default: the site's per GPU.",
    ),
]
TimeLimit = Annotated[
    float | None,
    typer.Option(
        "--time",
        parser=read_as_option(units.seconds),
        metavar="DURATION",
        help="Stop it after this long: 2h30m, 90m, 1:30:00.",
    ),
]
Name = Annotated[str | None, typer.Option(help="A label (default: the script's name).")]
Priority = Annotated[int | None, typer.Option(help="Higher starts first.")]
After = Annotated[
    list[int] | None,
    typer.Option(metavar="ID", help="Start only once job ID has succeeded (repeatable)."),
]
Retries = Annotated[int | None, typer.Option(help="Run it again up to N times after a failure.")]
NotBefore = Annotated[
    datetime | None,
    typer.Option(
        parser=read_as_option(units.parse_moment),
        metavar="TIME",
        help="Not before 18:00 (the next one) or an ISO time.",
    ),
]
IdleExempt = Annotated[
    str | None, typer.Option(metavar="REASON", help="Never end it as idle, for this reason.")
]
Env = Annotated[
    list[str] | None,
    typer.Option(metavar="K=V|K", help="Also set K (repeatable); K alone takes yours."),
]
Preemptible = Annotated[
    bool | None,
    typer.Option(
        "--preemptible",
        help="A more urgent job may stop it (SIGTERM) and queue it again: the program "
        "saves on SIGTERM and resumes from GPUQ_CHECKPOINT_DIR.",
    ),
]
Reservation = Annotated[
    str | None,
    typer.Option(
        metavar="NAME",
        help="Run in this reservation (`gpuq reservations`): on its GPUs once it opens.",
    ),
]
Sweep = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=V1,V2",
        help="Run a sweep: one job per combination of the values (repeatable); PROGRAM's "
        "{NAME} gets the value, and its environment GPUQ_PARAM_NAME.",
    ),
]
MaxParallel = Annotated[
    int | None,
    typer.Option(min=1, metavar="N", help="With --sweep: at most N members at once."),
]
SweepMetric = Annotated[
    str | None, typer.Option(metavar="NAME", help="With --sweep: the metric that ranks members.")
]
Mode = Annotated[str, typer.Option(metavar="min|max", help="With --metric: which way is better.")]
EarlyStopping = Annotated[
    bool,
    typer.Option(
        "--early-stopping",
        help="With --metric: stop members that trail the others (the median rule).",
    ),
]
Detach = Annotated[
    bool,
    typer.Option(
        "--detach",
        "-d",
        help="Print the job's (or sweep's) id, or with --json all of it, and return "
        "(gpuq run only).",
    ),
]
DryRun = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Only say where it would start now, or why it would wait; with --json, "
        "print the spec instead (for `gpuq submit`).",
    ),
]


@dataclass
class Given:
    """The options as given (units already read), in the order `--help` lists them."""

    program: Program = None
    gpus: Gpus = None
    gpu_ids: GpuIds = None
    nodes: Nodes = None
    mem: Mem = None
    cpus: Cpus = None
    host_mem: HostMem = None
    time_limit: TimeLimit = None
    name: Name = None
    priority: Priority = None
    after: After = None
    retries: Retries = None
    not_before: NotBefore = None
    idle_exempt: IdleExempt = None
    env: Env = None
    preemptible: Preemptible = None
    reservation: Reservation = None
    snapshot: SnapshotFlag = None
    sweep: Sweep = None
    max_parallel: MaxParallel = None
    metric: SweepMetric = None
    mode: Mode = "min"
    early_stopping: EarlyStopping = False
    detach: Detach = False
    dry_run: DryRun = False
    as_json: JsonFlag = False
    #: the program run when none is named (`gpuq shell`: the login shell)
    default_program: list[str] = field(default_factory=list)


def takes_run_options(act: Callable[[typer.Context, Given], None]) -> Callable[..., None]:
    """A command with every option of `Given` (one declaration for `gpuq run` and `gpuq
    shell`), which calls `act` with them."""

    def command(ctx: typer.Context, **options: Any) -> None:
        act(ctx, Given(**options))

    declared = [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type
        )
        for f in fields(Given)
        if f.name != "default_program"
    ]
    context = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
    )
    command.__signature__ = inspect.Signature([context, *declared])  # type: ignore[attr-defined]
    command.__name__ = act.__name__
    command.__doc__ = act.__doc__
    return command


def spec_from(given: Given, kind: str) -> dict[str, Any]:
    """The job (or, with --sweep, sweep) spec the options ask for, from this folder and
    environment; exit 2 naming the option of a value it refuses."""
    argv = list(given.program or ()) or given.default_program
    if not argv:
        raise typer.BadParameter(
            "name a program: gpuq run -- python train.py", param_hint="PROGRAM"
        )
    try:
        gpu_ids = parse_gpu_ids(given.gpu_ids) if given.gpu_ids else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--gpu-ids'") from None
    options = RunOptions(
        gpus=given.gpus,
        nodes=given.nodes,
        gpu_ids=gpu_ids,
        mem_mb=given.mem,
        cpus=given.cpus,
        host_memory_mb=given.host_mem,
        time_s=given.time_limit,
        name=given.name,
        priority=given.priority,
        after=given.after or [],
        retries=given.retries,
        not_before=given.not_before,
        idle_exempt=given.idle_exempt,
        env=given.env or [],
        preemptible=given.preemptible,
        reservation=given.reservation,
    )
    try:
        spec = run_spec.build_spec(kind, argv, options, cwd=os.getcwd(), environ=os.environ)
    except BadOption as exc:
        hint = exc.option if exc.option.isupper() else f"'{exc.option}'"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    if given.sweep:
        spec["sweep"] = _sweep_section(given)
    return spec


def _sweep_section(given: Given) -> dict[str, Any]:
    assert given.sweep
    try:
        return sweeps.sweep_section(
            given.sweep,
            max_parallel=given.max_parallel,
            metric=given.metric,
            mode=given.mode,
            early_stopping=given.early_stopping,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--sweep'") from None
