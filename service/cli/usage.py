"""`gpuq usage`: GPU-hours per user, per day or per GPU over a period, what came of them,
and how long attempts waited (`GET /v1/usage`)."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.text import Text

from service.cli import tables
from service.cli.options import JsonFlag, api_client, print_json
from service.cli.sweeps import counts_text
from service.errors import Invalid
from service.store.db import utcnow
from service.usage.efficiency import duration
from service.usage.period import period


class Cut(StrEnum):
    owner = "owner"
    day = "day"
    gpu = "gpu"


WHEN = "7d, 24h, 30m, now, or an ISO time (2026-11-25, 2026-11-25T06:00Z; no zone: UTC)."


def usage(
    ctx: typer.Context,
    since: Annotated[
        str | None, typer.Option(help=f"From (default 7 days before --until): {WHEN}")
    ] = None,
    until: Annotated[str | None, typer.Option(help=f"To (default now): {WHEN}")] = None,
    by: Annotated[Cut, typer.Option(help="A row per owner, per UTC day, or per GPU.")] = Cut.owner,
    as_json: JsonFlag = False,
) -> None:
    """GPU-hours, jobs by final state, GPU-hours lost, queue waits and shares of the box
    over a period (default: the last 7 days). Members see their own rows and the team's
    total; admins every row."""
    try:
        period(since, until, utcnow(), by=by.value)  # bad values exit 2 here, not as a 422
    except Invalid as exc:
        raise typer.BadParameter(exc.message, param_hint=f"'--{exc.loc[-1]}'") from None
    given = {"since": since, "until": until}
    params = {"by": by.value} | {k: v for k, v in given.items() if v is not None}
    report = api_client(ctx).json("GET", "/v1/usage", params=params)
    if as_json:
        print_json(report)
        return
    print(heading(report))
    tables.print_rendered(usage_table(report))


def heading(report: dict[str, Any]) -> str:
    """`usage 2026-11-18 09:00 to 2026-11-25 09:00 UTC (7 d), 2 GPUs`."""
    since, until = (datetime.fromisoformat(report[k]) for k in ("since", "until"))
    text = (
        f"usage {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC "
        f"({duration((until - since).total_seconds())}), {report['gpus']} GPUs"
    )
    if report.get("rows_of"):
        text += f"; rows: {report['rows_of']}'s work only, total: the whole team's"
    return text


def usage_table(report: dict[str, Any]) -> Any:
    """One row per owner, day or GPU, then the team's total."""
    by = report["by"]
    rows: list[tuple[str | Text, ...]] = [(_key(by, r), *_figures(r)) for r in report["rows"]]
    rows.append((Text("total", style="bold"), *_figures(report["total"])))
    headers = [by.upper(), "GPU-HOURS", "SHARE", "JOBS", "LOST GPU-HOURS", "WAIT P50/P95"]
    if report["total"].get("reserved_idle_gpu_hours"):  # booking has a cost: shown when paid
        headers.append("RESERVED IDLE")
        idle = [r["reserved_idle_gpu_hours"] for r in [*report["rows"], report["total"]]]
        rows = [
            (*row, _hours(hours) if hours else "-") for row, hours in zip(rows, idle, strict=True)
        ]
    return tables.table(headers, rows)


def _key(by: str, row: dict[str, Any]) -> str:
    value = row[by]
    return "?" if value is None else str(value)


def _figures(row: dict[str, Any]) -> tuple[str, ...]:
    lost = row["lost_gpu_hours"]
    lost_text = ", ".join(
        f"{_hours(lost[k])} to {k}" for k in ("failures", "preemptions") if lost[k] > 0
    )
    wait = row["queue_wait"]
    waits = f"{duration(wait['median_s'])} / {duration(wait['p95_s'])}" if wait["attempts"] else "-"
    share = "-" if row["share"] is None else f"{100 * row['share']:.1f}%"
    return (
        _hours(row["gpu_hours"]),
        share,
        counts_text(row["jobs"]) or "-",
        lost_text or "-",
        waits,
    )


def _hours(value: float) -> str:
    """GPU-hours to two places; a little that would round to nothing says so."""
    return "<0.01" if 0 < value < 0.005 else f"{value:.2f}"
