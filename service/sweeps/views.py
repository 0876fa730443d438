"""A sweep as the API shows it: its members counted (`summary`), its leaderboard
(`leaderboard`), its members' curves of the metric (`curves`)."""

import re
from typing import Any

from gpuq.contract.states import TERMINAL
from gpuq.contract.sweep import SweepSpec
from service.public import (
    SweepBest,
    SweepCurve,
    SweepCurves,
    SweepMember,
    SweepPublic,
    SweepSummary,
)
from service.store.db import Database
from service.store.tables import Sweep
from service.sweeps import leaderboard, reads
from service.sweeps.expand import UNREPORTED
from service.sweeps.reads import Tally

#: a metric name as Keras and `gpuq.report` make them: `val_loss`, `train/acc@1`
METRIC_NAME = re.compile(r"[A-Za-z0-9_./@-]{1,64}")


def _status(sweep: Sweep, tally: Tally) -> str:
    states = tally.states
    if states["starting"] or states["running"] or (states["queued"] and tally.started):
        return "running"
    if states["queued"]:
        return "queued"
    return "cancelled" if sweep.cancelled_at is not None else "ended"


def summary(sweep: Sweep, tally: Tally, warnings: list[str] | None = None) -> SweepSummary:
    spec = SweepSpec.model_validate(sweep.spec)
    status = _status(sweep, tally)
    return SweepSummary(
        id=sweep.id or 0,
        name=sweep.name,
        owner=sweep.owner,
        priority=sweep.priority,
        status=status,
        held=sweep.held and bool(tally.states["queued"]),
        size=sweep.size,
        counts={k: v for k, v in tally.states.items() if v},
        metric=spec.sweep.metric,
        mode=spec.sweep.mode,
        max_parallel=sweep.max_parallel,
        spec=spec,
        warnings=[*sweep.warnings, *(warnings or [])],
        cancelled_by=sweep.cancelled_by,
        created_at=sweep.created_at,
        finished_at=tally.finished_at if status in ("ended", "cancelled") else None,
    )


def summaries(db: Database, sweeps: list[Sweep]) -> list[SweepSummary]:
    found = reads.tallies(db, [s.id for s in sweeps if s.id is not None])
    return [summary(s, found[s.id]) for s in sweeps if s.id is not None]


def detail(db: Database, sweep: Sweep) -> SweepPublic:
    """The sweep with its leaderboard, the best member on top."""
    assert sweep.id is not None
    rows = {row.id: row for row in reads.members(db, sweep.id)}
    epochs = reads.member_epochs(db, sweep.id)
    spec = SweepSpec.model_validate(sweep.spec)
    metric, mode = spec.sweep.metric, spec.sweep.mode
    table = leaderboard.standings(list(rows), epochs, metric, mode)
    members = [_public_member(rows[s.job_id], s) for s in table]
    best = None
    if table and table[0].best is not None:
        top = table[0]
        best = SweepBest(job_id=top.job_id, params=rows[top.job_id].params or {}, value=top.best)
    tally = reads.tally_of(list(rows.values()))
    said = any(w.startswith(UNREPORTED) for w in sweep.warnings)
    head = summary(sweep, tally, [] if said else _unreported(metric, epochs, tally))
    return SweepPublic(**dict(head), best=best, members=members)


def _public_member(row: Any, standing: leaderboard.Standing) -> SweepMember:
    return SweepMember(
        job_id=row.id,
        name=row.name,
        params=row.params or {},
        status=row.status,
        reason=row.reason,
        message=row.message,
        held=row.held,
        epochs=standing.epochs,
        best=standing.best,
        last=standing.last,
        rank=standing.rank,
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def _unreported(metric: str | None, epochs: dict[int, Any], tally: Tally) -> list[str]:
    """A metric no member reported: said once a member has ended."""
    ended = sum(tally.states[s.value] for s in TERMINAL)
    if metric is None or not ended or leaderboard.reported(epochs, metric):
        return []
    names = sorted({n for own in epochs.values() for values in own.values() for n in values})
    # The names are the jobs' words, in a sentence of gpuq's: only those shaped like names.
    shown = [n for n in names if METRIC_NAME.fullmatch(n)]
    if len(shown) < len(names):
        shown.append(f"{len(names) - len(shown)} other name(s)")
    said = f"they report {', '.join(shown)}" if names else "they report no epoch metrics"
    return [
        f"no member has reported the metric {metric!r} yet ({said}): the leaderboard ranks "
        "nothing and early stopping never acts"
    ]


def curves(db: Database, sweep: Sweep) -> SweepCurves:
    """Each member's metric per epoch, for the dashboard's overlaid chart."""
    assert sweep.id is not None
    metric = SweepSpec.model_validate(sweep.spec).sweep.metric
    epochs = reads.member_epochs(db, sweep.id)
    out = []
    for row in reads.members(db, sweep.id):
        values = leaderboard.history(epochs.get(row.id, {}), metric) if metric else {}
        out.append(
            SweepCurve(
                job_id=row.id,
                params=row.params or {},
                status=row.status,
                epochs=list(values),
                values=list(values.values()),
            )
        )
    return SweepCurves(metric=metric, members=out)
