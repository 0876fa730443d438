"""A job that names a reservation (`spec.reservation`) is refused at submit unless one by
that name is not over, its owner is one of its users, and it fits in its GPUs."""

from gpuq.contract.spec import JobSpec
from service.errors import Invalid
from service.scheduler import booked
from service.scheduler.bookings import gpu_list
from service.store.db import Database, utcnow

FIELD = ("body", "reservation")


def check_reservation(db: Database, spec: JobSpec, owner: str) -> None:
    """Raises `Invalid` (422, naming `reservation`) if the job could never run in the
    reservation it names."""
    name = spec.reservation
    if name is None:
        return
    with db.read() as session:
        rows = booked.not_over(session.connection(), utcnow())
    row = next((r for r in rows if r.name == name), None)
    if row is None:
        raise Invalid(FIELD, f"no reservation {name!r} is open or to come: see `gpuq reservations`")
    if owner not in set(row.users) | booked.unix_group_members(row.group):
        who = ", ".join(row.users) + (f", group {row.group}" if row.group else "")
        raise Invalid(
            FIELD,
            f"{owner} is not one of reservation {name}'s users ({who}): its owner "
            f"{row.owner} may add you (`gpuq reserve --change {name} --users ...`)",
        )
    res = spec.resources
    held = set(row.gpu_indices)
    if res.gpu_count > len(held) or (res.gpu_ids and not set(res.gpu_ids) <= held):
        raise Invalid(
            FIELD,
            f"reservation {name} holds {gpu_list(held)}: the job's "
            f"{res.gpu_count} GPU(s){' ' + str(res.gpu_ids) if res.gpu_ids else ''} "
            "would never fit in it",
        )
