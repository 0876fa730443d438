"""What `gpuq serve` says as it starts: one line per fact that matters (state, database,
who jobs run as, GPUs, where it listens), gpuq's own lines only; libraries' set-up and
lifecycle lines (Alembic's plugins and migrations, uvicorn's start) only at debug level."""

import re
from pathlib import Path

from tests.e2e.server import Server

#: a line of gpuq's log format, from one of gpuq's own loggers
OWN_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (INFO|WARNING) (gpuq|service(\.\w+)+): (.*)$")


def start_and_stop(server: Server) -> list[str]:
    """The messages of one start and stop of `server`, each checked to be gpuq's own."""
    log = server.home.parent / "serve.log"
    log.unlink(missing_ok=True)
    server.start()
    server.kill()
    lines = log.read_text().splitlines()
    strangers = [line for line in lines if not OWN_LINE.match(line)]
    assert not strangers, "\n".join(lines)
    return [f"{m[2]}: {m[4]}" for m in map(OWN_LINE.match, lines) if m]


def one(messages: list[str], start: str) -> str:
    found = [m for m in messages if m.startswith(start)]
    assert len(found) == 1, (start, messages)
    return found[0]


def test_a_start_says_each_fact_once_and_nothing_of_the_libraries(tmp_path: Path):
    home = tmp_path / "gpuq"
    server = Server(home)
    first = start_and_stop(server)
    assert one(first, "gpuq: state in ") == f"gpuq: state in {home}"
    assert re.fullmatch(
        rf"gpuq: database sqlite:///{home}/gpuq\.db, schema \d{{4}}, created",
        one(first, "gpuq: database "),
    )
    # The suite runs as root with GPUQ_ALLOW_ROOT_JOBS=1: who jobs run as is a warning.
    one(first, "service.team.run_as: JOBS RUN AS ROOT")
    assert one(first, "gpuq: GPUs: ") == (
        "gpuq: GPUs: 2x Simulated GPU, 8192 MiB each (jobs train on CPU devices)"
    )
    assert one(first, "gpuq: listening on ").startswith(f"gpuq: listening on {server.url}: ")
    # ...and with no user, as root, the socket is root's alone (anyone else: an admin).
    assert "for root alone while no user exists" in one(first, f"gpuq: local login on {home}/")
    one(first, "gpuq: NO USERS DEFINED")
    # This machine's cgroup v1 controllers, as root: every job in cgroups of its own.
    fenced = "service.runtime.executor_choice: each job in cgroups of its own (cgroup v1, in "
    assert re.fullmatch(
        rf"{re.escape(fenced)}/sys/fs/cgroup/<controller>/gpuq-[0-9a-f]{{8}}\)", one(first, fenced)
    )
    assert first[-1] == "gpuq: stopped"
    assert len(first) == 9, first

    again = start_and_stop(server)
    database = one(again, "gpuq: database ")
    assert re.fullmatch(rf"gpuq: database sqlite:///{home}/gpuq\.db, schema \d{{4}}", database)


def test_simulated_gpus_chosen_for_want_of_a_driver_are_said_once(tmp_path: Path):
    server = Server(tmp_path / "gpuq")
    server.env["GPUQ_GPUS"] = "auto"  # this machine has no NVIDIA driver
    messages = start_and_stop(server)
    assert "running on SIMULATED GPUs (sim:2x16GiB)" in one(
        messages, "service.gpus.inventory: NO NVIDIA GPU FOUND"
    )


def test_at_debug_level_the_libraries_speak_too(tmp_path: Path):
    server = Server(tmp_path / "gpuq")
    server.env["GPUQ_LOG_LEVEL"] = "debug"
    server.start()
    server.kill()
    log = (tmp_path / "serve.log").read_text()
    assert "alembic.runtime.migration: Running upgrade  -> 0001" in log
    assert "Uvicorn running on" in log
