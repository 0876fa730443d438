"""Jobs made as production makes them: through an API-only service's `jobs.submit` (the
checks at submit, quotas and idempotency keys, the grouped submission), on the database a
test reads. The `db` fixture says which settings opened each database; the first job a
test makes opens that service, and the fixture closes it after the test. A database a
test serves (`tests.conftest.serving`) takes jobs through the service serving it."""

from typing import Any

from gpuq.contract.spec import JobSpec
from service.runtime import Service, open_api
from service.settings import Settings
from service.store.db import Database
from service.store.tables import Job
from service.team.users import Caller

_settings: dict[int, Settings] = {}  #: id(database) → the settings it was opened with
_services: dict[int, Service] = {}  #: id(database) → its API-only service, once opened
_served: dict[int, Service] = {}  #: id(database) → the service a test serves it with


def opened_with(db: Database, settings: Settings) -> None:
    _settings[id(db)] = settings


def served(service: Service, db: Database | None = None) -> None:
    """Jobs made on `db` (default: `service`'s own database) go through `service`."""
    _served[id(db or service.db)] = service


def unserved(db: Database) -> None:
    _served.pop(id(db), None)


def closed(db: Database) -> None:
    _settings.pop(id(db), None)
    service = _services.pop(id(db), None)
    if service is not None:
        service.close()


def submit_job(
    db: Database,
    *,
    spec: JobSpec | dict[str, Any],
    caller: Caller,
    idempotency_key: str | None = None,
) -> tuple[Job, bool]:
    """`caller` submits `spec`: the stored job, and False for a replayed key."""
    service = _served.get(id(db)) or _services.get(id(db))
    if service is None:
        service = _services[id(db)] = open_api(_settings[id(db)])
    if not isinstance(spec, JobSpec):
        spec = JobSpec.model_validate(spec)
    stored = service.jobs.submit(spec, caller, idempotency_key)
    return Job.model_validate(stored.row), stored.created
