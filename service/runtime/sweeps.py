"""What the API does with sweeps: submit one whole, cancel or hold all its members."""

import secrets
from collections.abc import Callable

from gpuq.contract.sweep import SweepSpec
from service.runtime.checks import SubmitChecks
from service.runtime.jobs import limits
from service.settings import Settings
from service.store.db import Database
from service.store.tables import Sweep
from service.sweeps import actions as sweep_actions
from service.sweeps.expand import expand
from service.sweeps.rerun import rerun_members
from service.sweeps.submit import create_sweep
from service.team.users import Caller


class Sweeps:
    def __init__(
        self, settings: Settings, db: Database, checks: SubmitChecks, wake: Callable[[], None]
    ) -> None:
        self.settings = settings
        self.db = db
        self.checks = checks
        self.wake = wake

    def submit(
        self, spec: SweepSpec, caller: Caller, idempotency_key: str | None = None
    ) -> tuple[Sweep, bool]:
        """Expands `spec` into its members (422 for too many, or a parameter the spec cannot
        take), admits each as a job, and stores the sweep with all of them at once; False for
        a replayed `idempotency_key` (the original sweep)."""
        settings = self.settings
        expansion = expand(spec, limit=settings.max_sweep_jobs, seed=secrets.randbelow(2**31))
        for member in expansion.members:  # a parameter may change what admission checks
            self.checks.check(member.spec, caller)
        stored = create_sweep(
            self.db,
            spec,
            expansion,
            caller,
            idempotency_key=idempotency_key,
            limits=limits(settings),
            defaults=self.checks.share_defaults,
        )
        self.wake()
        return stored

    def rerun(self, sweep_id: int, caller: Caller) -> tuple[Sweep, list[int]]:
        """Queues the sweep's failed and early-stopped points again (`sweeps.rerun`)."""
        made = rerun_members(
            self.db,
            sweep_id,
            caller,
            lambda spec: self.checks.check(spec, caller),
            limits=limits(self.settings),
            defaults=self.checks.share_defaults,
        )
        self.wake()
        return made

    def cancel(self, sweep_id: int, caller: Caller) -> Sweep:
        sweep = sweep_actions.cancel_sweep(self.db, sweep_id, caller)
        self.wake()
        return sweep

    def hold(self, sweep_id: int, caller: Caller, *, held: bool) -> Sweep:
        sweep = sweep_actions.hold_sweep(self.db, sweep_id, caller, held=held)
        self.wake()
        return sweep
