"""Following a just-submitted sweep to its end in the foreground (`gpuq run --sweep`): a
line as each member ends, and its leaderboard, redrawn in place on a terminal."""

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.live import Live

from gpuq.http import Client
from service.cli import follow as following
from service.cli import tables
from service.cli.follow import Interrupted, RunExit, interruptible
from service.cli.options import note
from service.cli.sweeps import ENDED, POLL_S, leaderboard_table, params_text, summary_text


def follow_sweep(api: Client, sweep: dict[str, Any]) -> int:
    """Follows a just-submitted sweep to its end: a line as each member ends, and the
    leaderboard (on a terminal redrawn in place as they end, else printed at the end).
    Ctrl-C cancels the sweep; a second one leaves at once. Exits 0 when no member failed,
    1 when one did, 121 if the sweep was cancelled, 130 after a Ctrl-C."""
    sweep_id = sweep["id"]
    live = sys.stdout.isatty()

    def to_the_end() -> dict[str, Any]:
        told: set[int] = set()
        current = sweep
        with live_board(current, live) as redraw:
            while True:
                for member in sorted(current["members"], key=lambda m: m["job_id"]):
                    if member["status"] in ENDED and member["job_id"] not in told:
                        told.add(member["job_id"])
                        note(member_line(member, current["metric"]))
                redraw(current)
                if current["status"] in ("ended", "cancelled"):
                    return current
                time.sleep(POLL_S)
                current = api.json("GET", f"/v1/sweeps/{sweep_id}")

    def leave() -> None:
        note(f"leaving; sweep {sweep_id} is still being stopped (`gpuq sweep show {sweep_id}`)")

    try:
        last, pressed = interruptible(
            to_the_end,
            (signal.SIGINT,),
            first=lambda: following.cancel_saying_so(api, sweep_id, "sweep"),
            second=leave,
        )
    except Interrupted:
        return RunExit.interrupted
    print(summary_text(last))
    if not live:  # on a terminal the live board stays where it was drawn
        tables.print_rendered(leaderboard_table(last))
    if pressed:
        return RunExit.interrupted
    if last["status"] == "cancelled":
        return RunExit.cancelled
    return 1 if last["counts"].get("failed") or last["counts"].get("timed_out") else 0


@contextlib.contextmanager
def live_board(sweep: dict[str, Any], live: bool) -> Iterator[Callable[[dict[str, Any]], None]]:
    """A redraw of the leaderboard in place (Rich's `Live`, which keeps gpuq's own lines
    on stderr above it) where `live`; elsewhere a redraw that draws nothing."""
    if not live:
        yield lambda _: None
        return
    board = Live(leaderboard_table(sweep), console=Console(highlight=False), auto_refresh=False)
    with board:
        yield lambda now: board.update(leaderboard_table(now), refresh=True)


def member_line(member: dict[str, Any], metric: str | None) -> str:
    """`job 12 (lr=0.001 bs=32) succeeded after 5 epochs: best val_loss 0.0312`."""
    why = f" ({member['reason']})" if member["reason"] and member["status"] != "succeeded" else ""
    line = f"job {member['job_id']} ({params_text(member['params'])}) {member['status']}{why}"
    if member["epochs"]:
        line += f" after {member['epochs']} epoch{'s' if member['epochs'] != 1 else ''}"
    if metric and member["best"] is not None:
        line += f": best {metric} {member['best']:.4g}"
    return line
