"""The reservations a plan weighs (`bookings.Booking`), read from the `reservation` table:
those not released whose window has not ended, each with its users and its group's
members (read from this host's accounts at each plan, so a member added to the group
counts at once)."""

import grp
import pwd
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Select, Table, bindparam, select

from service.scheduler.bookings import Booking, label
from service.store.reservation_tables import Reservation

RESERVATION: Table = Reservation.__table__  # type: ignore[attr-defined]


@cache
def _not_over() -> Select[Any]:
    r = RESERVATION.c
    return (
        select(
            r.id,
            r.name,
            r.owner,
            r.users,
            r.group,
            r.gpu_indices,
            r.starts_at,
            r.ends_at,
            r.cpus,
            r.host_memory_mb,
            r.slurm_name,
        )
        .where(r.released_at.is_(None), r.ends_at > bindparam("now"))
        .order_by(r.starts_at, r.id)
    )


def not_over(connection: Connection, now: datetime) -> list[Any]:
    """The rows of the reservations not released whose window has not ended."""
    return list(connection.execute(_not_over(), {"now": now}))


def bookings(rows: list[Any], now: datetime) -> list[Booking]:
    """The plan's view of `not_over`'s rows."""
    found = []
    for row in rows:
        users = frozenset(row.users) | unix_group_members(row.group)
        starts, ends = row.starts_at.timestamp(), row.ends_at.timestamp()
        found.append(
            Booking(
                row.name,
                frozenset(row.gpu_indices),
                starts,
                ends,
                users,
                label(row.name, row.users, row.group, starts, ends, now.timestamp()),
                row.cpus or 0.0,
                row.host_memory_mb or 0,
            )
        )
    return found


def unix_group_members(group: str | None) -> frozenset[str]:
    """The accounts in Unix group `group`, its members' primary group included (none if
    there is no such group)."""
    if group is None:
        return frozenset()
    try:
        entry = grp.getgrnam(group)
    except KeyError:
        return frozenset()
    primary = {p.pw_name for p in pwd.getpwall() if p.pw_gid == entry.gr_gid}
    return frozenset(entry.gr_mem) | primary
