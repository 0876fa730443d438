"""gpuq's reservations on a Slurm cluster: each is a Slurm reservation (`scontrol create
reservation`) named `gpuq-<name>`, and a job that names it is submitted with
`--reservation`, so Slurm itself keeps the nodes for its users in the window and backfills
around it.

Slurm reserves no GPUs as such (its reservations hold cores, nodes, licenses and burst
buffers), so N GPUs are booked as the fewest of the partition's nodes that hold N GPUs
between them: whole nodes. Its users are the reservation's users where jobs run as their
owners (`GPUQ_RUN_AS=owner`); otherwise every job is submitted as gpuq's own account,
which is then the Slurm reservation's one user (gpuq admits only the reservation's users
into it). Creating a reservation takes a Slurm operator or administrator: where gpuq's
account is neither, Slurm refuses, and so does gpuq, with Slurm's words.
"""

import os
import pwd
from collections.abc import Sequence
from datetime import datetime

from service.executors.base import Cluster, Node
from service.executors.slurm.commands import SlurmError, run_command
from service.settings import Settings

PREFIX = "gpuq-"


def slurm_name(name: str) -> str:
    return PREFIX + name


def nodes_for(gpus: int, nodes: Sequence[Node]) -> int | None:
    """How many of `nodes` (the largest first) hold `gpus` GPUs between them; None if all
    of them do not."""
    held = 0
    for count, node in enumerate(sorted(nodes, key=lambda n: -n.gpus), start=1):
        held += node.gpus
        if held >= gpus:
            return count
    return None


def _moment(at: datetime) -> str:
    """A time as `scontrol` reads it: this host's local time."""
    return at.astimezone().strftime("%Y-%m-%dT%H:%M:%S")


def window_fields(starts_at: datetime, ends_at: datetime, now: datetime) -> list[str]:
    start = "now" if starts_at <= now else _moment(starts_at)
    return [f"StartTime={start}", f"EndTime={_moment(ends_at)}"]


def create_argv(
    name: str,
    starts_at: datetime,
    ends_at: datetime,
    node_count: int,
    users: Sequence[str],
    partition: str | None,
    now: datetime,
) -> list[str]:
    argv = ["scontrol", "create", "reservation", f"ReservationName={slurm_name(name)}"]
    argv += window_fields(starts_at, ends_at, now)
    # IGNORE_JOBS: booked even while jobs run on its nodes now (Slurm lets them finish).
    argv += [f"NodeCnt={node_count}", f"Users={','.join(users)}", "Flags=IGNORE_JOBS"]
    return argv + ([f"PartitionName={partition}"] if partition else [])


def update_argv(
    name: str, starts_at: datetime, ends_at: datetime, users: Sequence[str], now: datetime
) -> list[str]:
    argv = ["scontrol", "update", f"ReservationName={slurm_name(name)}"]
    window = window_fields(starts_at, ends_at, now)
    if starts_at <= now:  # open already: its start stays where it is
        window = window[1:]
    return argv + window + [f"Users={','.join(users)}"]


def delete_argv(name: str) -> list[str]:
    return ["scontrol", "delete", f"ReservationName={slurm_name(name)}"]


def slurm_users(settings: Settings, users: Sequence[str]) -> list[str]:
    """Whom Slurm lets into it: the users themselves where jobs run as their owners, else
    gpuq's own account (which submits every job)."""
    if settings.run_as == "owner":
        return sorted(set(users))
    return [pwd.getpwuid(os.geteuid()).pw_name]


class Refused(Exception):
    """Slurm would not book it; the message has Slurm's words and what to do."""


def run(argv: list[str], what: str) -> None:
    """Runs an `scontrol` reservation command; `Refused` with Slurm's words if it fails."""
    try:
        run_command(argv)
    except SlurmError as exc:
        said = str(exc)
        hint = (
            ": gpuq's account must be a Slurm operator to book nodes (`sacctmgr modify user "
            "NAME set adminlevel=operator`), or an admin books it with scontrol"
            if "permission" in said.lower() or "access" in said.lower()
            else ""
        )
        raise Refused(f"Slurm would not {what} the reservation: {said}{hint}") from exc


class SlurmBookings:
    """Books, changes and deletes gpuq's reservations in Slurm (the API's process asks, in
    the write that stores them: a refusal stores nothing)."""

    def __init__(self, settings: Settings, cluster: Cluster) -> None:
        self.settings = settings
        self.cluster = cluster  #: the partition's GPU nodes

    def book(
        self, name: str, gpus: int, starts_at: datetime, ends_at: datetime, users: Sequence[str]
    ) -> str:
        """Creates it; its Slurm name. `Refused` if Slurm will not, or the partition's nodes
        do not hold `gpus` GPUs between them."""
        try:
            nodes = self.cluster.nodes()
        except OSError as exc:
            raise Refused(f"cannot ask Slurm for its nodes: {exc}") from exc
        count = nodes_for(gpus, nodes)
        if count is None:
            held = sum(n.gpus for n in nodes)
            raise Refused(
                f"the partition's {len(nodes)} node(s) hold {held} GPUs between them: "
                f"{gpus} cannot be booked"
            )
        now = datetime.now(starts_at.tzinfo)
        partition = self.settings.slurm_partition
        who = slurm_users(self.settings, users)
        run(create_argv(name, starts_at, ends_at, count, who, partition, now), "create")
        return slurm_name(name)

    def change(
        self, name: str, starts_at: datetime, ends_at: datetime, users: Sequence[str]
    ) -> None:
        now = datetime.now(starts_at.tzinfo)
        run(update_argv(name, starts_at, ends_at, slurm_users(self.settings, users), now), "change")

    def cancel(self, name: str) -> None:
        run(delete_argv(name), "delete")
