"""Booking, changing, deleting and reading reservations, each in one transaction: the
checks (`rules`) and the write land together, so two bookings at once never both take a
GPU. On a Slurm cluster the booking is made in Slurm inside that write (`SlurmBookings`):
a refusal there stores nothing."""

import grp
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from service.errors import Conflict, Forbidden, Invalid, NotFound
from service.executors.slurm.reservations import Refused, SlurmBookings
from service.host import HostSize
from service.reservations import rules
from service.reservations.public import ReservationPublic, public_view
from service.reservations.requests import ReservationBody, ReservationChange, window_of
from service.settings import Settings
from service.store.db import Database, utcnow
from service.store.reservation_tables import Reservation
from service.team.audit import record
from service.team.users import Caller

#: how far in the past a window may open (a clock a little behind, a slow request)
PAST_S = 60


def live_rows(session: Session, now: datetime) -> list[Reservation]:
    query = select(Reservation).where(
        col(Reservation.released_at).is_(None), col(Reservation.ends_at) > now
    )
    return list(session.exec(query.order_by(col(Reservation.starts_at))).all())


def find(session: Session, key: str, now: datetime) -> Reservation:
    """By id, or by name: the one not over, else the latest of that name; 404 if none."""
    if key.isdigit():
        row = session.get(Reservation, int(key))
    else:
        live = [r for r in live_rows(session, now) if r.name == key]
        query = select(Reservation).where(Reservation.name == key)
        row = live[0] if live else session.exec(query.order_by(col(Reservation.id).desc())).first()
    if row is None:
        raise NotFound(f"no reservation {key!r}: see `gpuq reservations --all`")
    return row


class Bookings:
    """What the API does with reservations on this box (GPUs by index) or, with `slurm`,
    on a cluster."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        gpus: Sequence[int],
        box: HostSize | None,
        slurm: SlurmBookings | None,
        wake: Callable[[], None] = lambda: None,
    ) -> None:
        self.db, self.settings, self.gpus, self.box, self.slurm = db, settings, gpus, box, slurm
        self.wake = wake  #: the scheduler plans again at once

    def book(self, body: ReservationBody, caller: Caller) -> ReservationPublic:
        now = utcnow()
        starts, ends = window_of(body.starts_at, body.ends_at, body.duration_s)
        self._check_start(starts, now)
        users = sorted(set(body.users or [caller.name]))
        _check_group(body.group)
        with self.db.write() as session:
            live = live_rows(session, now)
            if any(r.name == body.name for r in live):
                raise Conflict(f"a reservation named {body.name!r} is booked already")
            self._check_limit(caller, body.gpu_count, starts, ends, now, live)
            gpus = self._gpus(body, rules.overlapping(live, starts, ends), now)
            row = Reservation(
                name=body.name,
                owner=caller.name,
                users=users,
                group=body.group,
                gpu_indices=gpus,
                named=body.gpu_ids is not None,
                cpus=body.cpus,
                host_memory_mb=body.host_memory_mb,
                starts_at=starts,
                ends_at=ends,
            )
            if self.slurm is not None:
                with _refused_as_conflict():
                    row.slurm_name = self.slurm.book(body.name, len(gpus), starts, ends, users)
            session.add(row)
            session.flush()
            record(session, caller.name, "reserve", f"reservation/{row.id}", name=row.name)
            view = public_view(row, now)
        self.wake()
        return view

    def change(self, key: str, body: ReservationChange, caller: Caller) -> ReservationPublic:
        now = utcnow()
        with self.db.write() as session:
            row = self._own(session, key, caller, now)
            starts = body.starts_at or row.starts_at
            if body.starts_at is not None:
                self._check_start(starts, now)
            new_end = body.ends_at is not None or body.duration_s is not None
            try:
                starts, ends = window_of(
                    starts,
                    body.ends_at if new_end else row.ends_at,
                    body.duration_s if new_end else None,
                )
            except ValueError as exc:
                raise Invalid(("body", "ends_at"), str(exc)) from None
            if "group" in body.model_fields_set:
                _check_group(body.group)
            users = sorted(set(body.users)) if body.users is not None else list(row.users)
            others = [r for r in live_rows(session, now) if r.id != row.id]
            self._check_limit(caller, len(row.gpu_indices), starts, ends, now, others)
            clashing = rules.overlapping(others, starts, ends)
            if self.slurm is None:
                rules.choose_gpus(self.gpus, 0, row.gpu_indices, clashing, now)
            rules.check_room(row.cpus, row.host_memory_mb, clashing, self.box, now)
            if self.slurm is not None:
                with _refused_as_conflict():
                    self.slurm.change(row.name, starts, ends, users)
            row.starts_at, row.ends_at, row.users, row.updated_at = starts, ends, users, now
            if "group" in body.model_fields_set:
                row.group = body.group
            session.add(row)
            record(session, caller.name, "change", f"reservation/{row.id}", name=row.name)
            view = public_view(row, now)
        self.wake()
        return view

    def delete(self, key: str, caller: Caller) -> ReservationPublic:
        now = utcnow()
        with self.db.write() as session:
            row = self._own(session, key, caller, now)
            if self.slurm is not None and row.slurm_name is not None:
                with _refused_as_conflict():
                    self.slurm.cancel(row.name)
            row.released_at = row.updated_at = now
            row.released_why = f"deleted by {caller.name}"
            session.add(row)
            record(session, caller.name, "unreserve", f"reservation/{row.id}", name=row.name)
            view = public_view(row, now)
        self.wake()
        return view

    def listed(self, everything: bool) -> list[ReservationPublic]:
        now = utcnow()
        with self.db.read() as session:
            if everything:
                rows = list(session.exec(select(Reservation).order_by(col(Reservation.starts_at))))
            else:
                rows = live_rows(session, now)
            return [public_view(r, now) for r in rows]

    def shown(self, key: str) -> ReservationPublic:
        now = utcnow()
        with self.db.read() as session:
            return public_view(find(session, key, now), now)

    def _own(self, session: Session, key: str, caller: Caller, now: datetime) -> Reservation:
        """The reservation `key`, not over, if `caller` booked it or is an admin."""
        row = find(session, key, now)
        if not caller.manages(row.owner):
            raise Forbidden(f"reservation {row.name} is {row.owner}'s: they or an admin change it")
        if row.released_at is not None or row.ends_at <= now:
            raise Conflict(f"reservation {row.name} is over ({row.released_why or 'ended'})")
        return row

    def _check_start(self, starts: datetime, now: datetime) -> None:
        if starts < now - timedelta(seconds=PAST_S):
            raise Invalid(
                ("body", "starts_at"), f"starts_at is in the past ({starts:%Y-%m-%d %H:%M} UTC)"
            )

    def _check_limit(
        self,
        caller: Caller,
        gpus: int,
        starts: datetime,
        ends: datetime,
        now: datetime,
        others: Sequence[Reservation],
    ) -> None:
        if caller.admin:
            return
        mine = [r for r in others if r.owner == caller.name]
        most = self.settings.max_reserved_gpu_hours
        rules.check_limit(mine, gpus, starts, ends, most, now)

    def _gpus(self, body: ReservationBody, clashing: list[Reservation], now: datetime) -> list[int]:
        """The GPUs it holds (on a cluster: as many, numbered from 0; Slurm picks nodes)."""
        if self.slurm is not None:
            if body.gpu_ids is not None:
                raise Invalid(
                    ("body", "gpu_ids"),
                    "on a Slurm cluster Slurm picks the nodes: ask a count (`gpus`)",
                )
            return list(range(body.gpu_count))
        missing = sorted(set(body.gpu_ids or ()) - set(self.gpus))
        if missing:
            raise Invalid(("body", "gpu_ids"), f"this box has no GPU {missing[0]}")
        if body.gpu_count > len(self.gpus):
            raise Invalid(("body", "gpus"), f"this box has {len(self.gpus)} GPUs")
        rules.check_room(body.cpus, body.host_memory_mb, clashing, self.box, now)
        return rules.choose_gpus(self.gpus, body.gpu_count, body.gpu_ids, clashing, now)


def _check_group(group: str | None) -> None:
    if group is None:
        return
    try:
        grp.getgrnam(group)
    except KeyError:
        raise Invalid(("body", "group"), f"no Unix group {group!r} on this host") from None


@contextmanager
def _refused_as_conflict() -> Iterator[None]:
    """What Slurm refuses, answered 409 with Slurm's words."""
    try:
        yield
    except Refused as exc:
        raise Conflict(str(exc)) from exc
