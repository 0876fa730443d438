"""`gpuq run -- PROGRAM ARGS...` (a command job from where you stand, in the foreground)
and `gpuq shell [-- PROGRAM ARGS...]` (an interactive session on your terminal).

Both are one function with one set of options, each setting one spec field
(`run_spec.OPTIONS`); which command it is comes from the name it was called by.
"""

import json
import os
import pwd
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer

from gpuq.http import ApiError, Client
from service.cli import run_spec, sweeps, units
from service.cli.attach import attach
from service.cli.follow import (
    Interrupted,
    RunExit,
    accepted,
    cancel,
    end_line,
    exit_code_of,
    follow,
    interruptible,
    note,
    print_changes,
    state_line,
)
from service.cli.jobs import preview_text
from service.cli.options import JsonFlag, client
from service.cli.run_spec import BadOption, RunOptions

T = TypeVar("T")

#: `gpuq run python train.py --lr 3`: options end at the program, as after `--`
SETTINGS = {"allow_interspersed_args": False}

RUN_HELP = """Run PROGRAM as a job from this folder, in the foreground: its output here, its
exit code at the end (Ctrl-C cancels it). PROGRAM is found on your PATH; PATH,
VIRTUAL_ENV, CONDA_PREFIX, CONDA_DEFAULT_ENV, PYTHONPATH, LANG and LC_* travel with it,
and what you name with --env. Exit codes of gpuq's own: 121 cancelled, 122 stopped
by gpuq (memory cap, wrong GPU, idle), 123 lost, 124 time limit, 127 could not start,
130 Ctrl-C."""

SHELL_HELP = """An interactive session on GPUs: once placed, your login shell (or PROGRAM,
e.g. `jupyter lab --no-browser`) runs here, as you, with the job's GPUs and caps. It
queues like any job; leaving the shell, or this terminal closing, ends it. Exits with the
shell's exit code."""


def _read(parse: Callable[[str], T]) -> Callable[[str], T]:
    """`parse`, with its `ValueError` told as the option's bad value (exit 2)."""

    def parser(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parser


def _gpu_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ValueError(f"{text!r} is not a list of GPU indices: write 0,2") from None


def run_or_shell(
    ctx: typer.Context,
    program: Annotated[
        list[str] | None,
        typer.Argument(metavar="[--] PROGRAM [ARGS]...", help="What to run.", show_default=False),
    ] = None,
    gpus: Annotated[int | None, typer.Option(help="How many GPUs (0: the CPU). Default 1.")] = None,
    gpu_ids: Annotated[
        str | None,
        typer.Option("--gpu-ids", metavar="0,2", help="These GPUs (their indices)."),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            help="Machines to run on at once, --gpus on each (Slurm executor): every node "
            "gets TF_CONFIG and torchrun's MASTER_ADDR, RANK... Default 1."
        ),
    ] = None,
    mem: Annotated[
        int | None,
        typer.Option(
            parser=_read(units.mebibytes),
            metavar="SIZE",
            help="Memory cap per GPU: 8GiB, 8G, 8192M, 8192 (MiB). Default: whole GPUs.",
        ),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option(
            "--time",
            parser=_read(units.seconds),
            metavar="DURATION",
            help="Stop it after this long: 2h30m, 90m, 1:30:00.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="A label (default: the script's name).")] = None,
    priority: Annotated[int | None, typer.Option(help="Higher starts first.")] = None,
    after: Annotated[
        list[int] | None,
        typer.Option(metavar="ID", help="Start only once job ID has succeeded (repeatable)."),
    ] = None,
    retries: Annotated[
        int | None, typer.Option(help="Run it again up to N times after a failure.")
    ] = None,
    not_before: Annotated[
        datetime | None,
        typer.Option(
            parser=_read(units.moment),
            metavar="TIME",
            help="Not before 18:00 (the next one) or an ISO time.",
        ),
    ] = None,
    idle_exempt: Annotated[
        str | None,
        typer.Option(metavar="REASON", help="Never end it as idle, for this reason."),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(metavar="K=V|K", help="Also set K (repeatable); K alone takes yours."),
    ] = None,
    preemptible: Annotated[
        bool | None,
        typer.Option(
            "--preemptible",
            help="A more urgent job may stop it (SIGTERM) and queue it again: the program "
            "saves on SIGTERM and resumes from GPUQ_CHECKPOINT_DIR.",
        ),
    ] = None,
    sweep: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=V1,V2",
            help="Run a sweep: one job per combination of the values (repeatable); PROGRAM's "
            "{NAME} gets the value, and its environment GPUQ_PARAM_NAME.",
        ),
    ] = None,
    max_parallel: Annotated[
        int | None,
        typer.Option(min=1, metavar="N", help="With --sweep: at most N members at once."),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="With --sweep: the metric that ranks members."),
    ] = None,
    mode: Annotated[
        str, typer.Option(metavar="min|max", help="With --metric: which way is better.")
    ] = "min",
    early_stopping: Annotated[
        bool,
        typer.Option(
            "--early-stopping",
            help="With --metric: stop members that trail the others (the median rule).",
        ),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option(
            "--detach",
            "-d",
            help="Print the job's (or sweep's) id, or with --json all of it, and return "
            "(gpuq run only).",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Only say where it would start now, or why it would wait; with --json, "
            "print the spec instead (for `gpuq submit`).",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    session = ctx.info_name == "shell"
    if session:
        if detach:
            raise typer.BadParameter("a session needs your terminal", param_hint="'--detach'")
        if as_json and not dry_run:
            raise typer.BadParameter("a session shows a terminal", param_hint="'--json'")
        if retries:
            raise typer.BadParameter(
                "a session is not run again: its terminal is gone by then", param_hint="'--retries'"
            )
    if sweep and session:
        raise typer.BadParameter("a sweep runs batch jobs, not sessions", param_hint="'--sweep'")
    if not sweep:
        _no_sweep_options(max_parallel=max_parallel, metric=metric, early_stopping=early_stopping)
    if mode not in ("min", "max"):
        raise typer.BadParameter(f"{mode!r}: write min or max", param_hint="'--mode'")
    argv = list(program or ()) or ([_login_shell()] if session else [])
    if not argv:
        raise typer.BadParameter(
            "name a program: gpuq run -- python train.py", param_hint="PROGRAM"
        )
    try:
        gpu_list = _gpu_ids(gpu_ids) if gpu_ids else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--gpu-ids'") from None
    options = RunOptions(
        gpus=gpus,
        nodes=nodes,
        gpu_ids=gpu_list,
        mem_mb=mem,
        time_s=time_limit,
        name=name,
        priority=priority,
        after=after or [],
        retries=retries,
        not_before=not_before,
        idle_exempt=idle_exempt,
        env=env or [],
        preemptible=preemptible,
    )
    try:
        spec = run_spec.build(
            "session" if session else "command",
            argv,
            options,
            cwd=os.getcwd(),
            environ=os.environ,
        )
    except BadOption as exc:
        hint = exc.option if exc.option.isupper() else f"'{exc.option}'"
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    if sweep:
        try:
            spec["sweep"] = sweeps.sweep_section(
                sweep,
                max_parallel=max_parallel,
                metric=metric,
                mode=mode,
                early_stopping=early_stopping,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'--sweep'") from None
        if dry_run and not as_json:
            raise typer.BadParameter(
                "a sweep's dry run prints its spec: add --json", param_hint="'--dry-run'"
            )
    if dry_run and as_json:
        print(json.dumps(spec, indent=2))
        return
    api = client(ctx)
    if sweep:
        raise typer.Exit(_sweep(api, spec, detach=detach, as_json=as_json))
    if dry_run:
        with options_named():
            preview = api.json("POST", "/v1/jobs", json=spec, params={"dry_run": "true"})
        print(preview_text(preview))
        return
    with options_named():
        job = api.json("POST", "/v1/jobs", json=spec)
    if detach:
        # The accepted job with --json, as `gpuq submit --json` prints it; else its id alone.
        print(json.dumps(job, indent=2) if as_json else job["id"])
        note(f"job {job['id']} queued; `gpuq logs -f {job['id']}` follows it")
        return
    code = _shell(api, job) if session else follow(api, job, as_json=as_json)
    raise typer.Exit(code)


@contextmanager
def options_named() -> Iterator[None]:
    """A value gpuq refused (a 422 on a field an option sets: more GPUs than the box has, a
    dependency that is not there) is exit 2 naming that option, as a value refused here is."""
    try:
        yield
    except ApiError as exc:
        loc = exc.errors[0].get("loc", []) if exc.status_code == 422 and exc.errors else []
        option = run_spec.option_for(loc[1:]) if loc[:1] == ["body"] else None
        if option is None:
            raise
        hint = option if option.isupper() else f"'{option}'"
        raise typer.BadParameter(exc.errors[0].get("msg", str(exc)), param_hint=hint) from None


def _no_sweep_options(**given: Any) -> None:
    """Options that only a sweep takes, given without --sweep: exit 2 naming the first."""
    for name, value in given.items():
        if value:
            option = "--" + name.replace("_", "-")
            raise typer.BadParameter("goes with --sweep", param_hint=f"'{option}'")


def _sweep(api: Client, spec: dict[str, Any], *, detach: bool, as_json: bool) -> int:
    """Submits the sweep; with --detach prints it (its id, or with --json all of it) and
    returns, else follows it to its end."""
    with options_named():
        made = api.json("POST", "/v1/sweeps", json=spec)
    if detach:
        if as_json:
            print(json.dumps(made, indent=2))
        else:
            print(made["id"])
            note(f"{sweeps.submitted_line(made)}; `gpuq sweep show {made['id']}` ranks them")
        return 0
    note(sweeps.submitted_line(made))
    for warning in made["warnings"]:
        note(f"warning: {warning}")
    return sweeps.follow(api, made)


def _login_shell() -> str:
    """The caller's shell: $SHELL, else their account's, else sh."""
    try:
        account_shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        account_shell = ""
    return os.environ.get("SHELL") or account_shell or "/bin/sh"


def _shell(api: Client, job: dict[str, Any]) -> int:
    """Waits for the session to start, attaches this terminal, and says how it ended.
    Ctrl-C, or the terminal going away, while it waits cancels it."""
    job_id = job["id"]

    def until_running() -> dict[str, Any]:
        seen = accepted(api, job)
        return print_changes(api.changes(job_id), state_line(seen), until=frozenset({"running"}))

    try:
        started, _ = interruptible(
            until_running, (signal.SIGINT, signal.SIGHUP), first=lambda: cancel(api, job_id)
        )
    except Interrupted:
        return RunExit.interrupted
    if started["status"] == "running":
        note(f"{state_line(started)}: your session; leave the shell to end it")
        sys.stdout.flush()
        attach(api, job_id)
    final = started
    for final in api.changes(job_id):  # noqa: B007 - the last one is the end
        pass
    note(end_line(final))
    return exit_code_of(final)
