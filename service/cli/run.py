"""`gpuq run -- PROGRAM ARGS...` (a command job from where you stand, in the foreground)
and `gpuq shell [-- PROGRAM ARGS...]` (an interactive session on your terminal).

Each is a function of its own over the options they share, declared once, and one
builder from the options to a spec (`run_options`).
"""

import json
import os
import pwd
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from gpuq.http import ApiError, Client
from service.cli import run_spec, sweeps
from service.cli.attach import attach
from service.cli.follow import (
    Interrupted,
    RunExit,
    accepted,
    cancel_saying_so,
    end_line,
    exit_code_of,
    follow_job,
    interruptible,
    print_changes,
    state_line,
)
from service.cli.jobs import preview_text
from service.cli.options import api_client, note
from service.cli.run_options import Given, spec_from, takes_run_options
from service.cli.snapshot_upload import with_snapshot
from service.cli.sweep_follow import follow_sweep

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


@takes_run_options
def run(ctx: typer.Context, given: Given) -> None:
    """`gpuq run`: a command job, followed to its end (or with --detach, left to run)."""
    if not given.sweep:
        _no_sweep_options(given)
    _check_mode(given)
    spec = spec_from(given, "command")
    if given.sweep and given.dry_run and not given.as_json:
        raise typer.BadParameter(
            "a sweep's dry run prints its spec: add --json", param_hint="'--dry-run'"
        )
    if given.dry_run and given.as_json:
        print(json.dumps(spec, indent=2))
        return
    api = api_client(ctx)
    if not given.dry_run:
        spec = with_snapshot(api, spec, given.snapshot)
    if given.sweep:
        raise typer.Exit(_sweep(api, spec, detach=given.detach, as_json=given.as_json))
    if given.dry_run:
        _dry_run(api, spec)
        return
    with options_named():
        job = api.json("POST", "/v1/jobs", json=spec)
    if given.detach:
        # The accepted job with --json, as `gpuq submit --json` prints it; else its id alone.
        print(json.dumps(job, indent=2) if given.as_json else job["id"])
        note(f"job {job['id']} queued; `gpuq logs -f {job['id']}` follows it")
        return
    raise typer.Exit(follow_job(api, job, as_json=given.as_json))


@takes_run_options
def shell(ctx: typer.Context, given: Given) -> None:
    """`gpuq shell`: a session, attached to this terminal once it starts."""
    if given.detach:
        raise typer.BadParameter("a session needs your terminal", param_hint="'--detach'")
    if given.as_json and not given.dry_run:
        raise typer.BadParameter("a session shows a terminal", param_hint="'--json'")
    if given.retries:
        raise typer.BadParameter(
            "a session is not run again: its terminal is gone by then", param_hint="'--retries'"
        )
    if given.sweep:
        raise typer.BadParameter("a sweep runs batch jobs, not sessions", param_hint="'--sweep'")
    _no_sweep_options(given)
    _check_mode(given)
    given.default_program = [_login_shell()]
    spec = spec_from(given, "session")
    if given.dry_run and given.as_json:
        print(json.dumps(spec, indent=2))
        return
    api = api_client(ctx)
    if given.dry_run:
        _dry_run(api, spec)
        return
    spec = with_snapshot(api, spec, given.snapshot)
    with options_named():
        job = api.json("POST", "/v1/jobs", json=spec)
    raise typer.Exit(_attach_session(api, job))


def _dry_run(api: Client, spec: dict[str, Any]) -> None:
    """Prints where the job would start now, or why it would wait."""
    with options_named():
        preview = api.json("POST", "/v1/jobs", json=spec, params={"dry_run": "true"})
    print(preview_text(preview))


def _check_mode(given: Given) -> None:
    """--mode other than min or max: exit 2."""
    if given.mode not in ("min", "max"):
        raise typer.BadParameter(f"{given.mode!r}: write min or max", param_hint="'--mode'")


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


def _no_sweep_options(given: Given) -> None:
    """Options that only a sweep takes, given without --sweep: exit 2 naming the first."""
    only = {"max_parallel": given.max_parallel, "metric": given.metric}
    for name, value in (*only.items(), ("early_stopping", given.early_stopping)):
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
    return follow_sweep(api, made)


def _login_shell() -> str:
    """The caller's shell: $SHELL, else their account's, else sh."""
    try:
        account_shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        account_shell = ""
    return os.environ.get("SHELL") or account_shell or "/bin/sh"


def _attach_session(api: Client, job: dict[str, Any]) -> int:
    """Waits for the session to start, attaches this terminal, and says how it ended.
    Ctrl-C, or the terminal going away, while it waits cancels it."""
    job_id = job["id"]

    def until_running() -> dict[str, Any]:
        seen = accepted(api, job)
        return print_changes(api.changes(job_id), state_line(seen), until=frozenset({"running"}))

    try:
        started, _ = interruptible(
            until_running,
            (signal.SIGINT, signal.SIGHUP),
            first=lambda: cancel_saying_so(api, job_id),
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
