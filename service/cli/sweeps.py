"""`gpuq sweep submit|ls|show|cancel|hold|release` and the leaderboard table (which
`sweep_follow` redraws as a sweep in the foreground goes on)."""

from collections.abc import Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from gpuq.contract.sweep import param_text
from service.cli import tables
from service.cli.options import JsonFlag, api_client, note, print_json
from service.cli.snapshot_upload import SnapshotFlag, of_submitted
from service.cli.spec_files import read_spec_file

#: how often a followed sweep is read again
POLL_S = 1.0
#: member states that are an end
ENDED = frozenset({"succeeded", "failed", "cancelled", "timed_out"})

SweepIdArg = Annotated[
    int, typer.Argument(metavar="ID", help="The sweep's id.", show_default=False)
]

app = typer.Typer(
    name="sweep",
    help="Sweeps: many runs of one experiment, ranked by a metric (`sweep show ID`).",
    no_args_is_help=True,
)


@app.command("submit")
def submit(
    ctx: typer.Context,
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", help="A job spec with a `sweep` section, JSON or YAML; - reads stdin."
        ),
    ],
    idempotency_key: Annotated[
        str | None,
        typer.Option(help="Replaying the same key returns the same sweep instead of a new one."),
    ] = None,
    snapshot: SnapshotFlag = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a sweep: every member is queued at once, all on one snapshot of the command's
    `workdir` when it is in a git work tree. Exits 2 if the file cannot be read."""
    spec = read_spec_file(file)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    api = api_client(ctx)
    spec = of_submitted(api, spec, snapshot)
    sweep = api.json("POST", "/v1/sweeps", json=spec, headers=headers)
    if as_json:
        print_json(sweep)
        return
    print(submitted_line(sweep))
    for warning in sweep["warnings"]:
        note(f"warning: {warning}")


def submitted_line(sweep: dict[str, Any]) -> str:
    ids = [m["job_id"] for m in sweep["members"]]
    jobs = f"jobs {min(ids)}-{max(ids)}" if len(ids) > 1 else f"job {ids[0]}"
    at_once = f", {sweep['max_parallel']} at a time" if sweep["max_parallel"] else ""
    return (
        f"submitted sweep {sweep['id']} ({sweep['name']}): {sweep['size']} members, {jobs}{at_once}"
    )


@app.command("ls")
def list_sweeps(
    ctx: typer.Context,
    owner: Annotated[str | None, typer.Option(help="Only this user's sweeps.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """Sweeps, newest first, with their members counted by state."""
    params: dict[str, Any] = {"limit": limit}
    if owner:
        params["owner"] = owner
    page = api_client(ctx).json("GET", "/v1/sweeps", params=params)
    if as_json:
        print_json(page)
        return
    rows = [
        (
            s["id"],
            s["name"],
            s["owner"],
            tables.state(s["status"]) if s["status"] in tables.STYLES else s["status"],
            s["size"],
            counts_text(s["counts"]),
            s["metric"] and f"{s['metric']} ({s['mode']})",
        )
        for s in page["sweeps"]
    ]
    tables.print_rendered(
        tables.table(["ID", "NAME", "OWNER", "STATUS", "SIZE", "MEMBERS", "METRIC"], rows)
    )


def counts_text(counts: dict[str, int]) -> str:
    """`2 running, 1 queued, 3 succeeded`."""
    order = ["running", "starting", "queued", "succeeded", "failed", "cancelled", "timed_out"]
    return ", ".join(f"{counts[s]} {s}" for s in order if counts.get(s))


@app.command("show")
def show(ctx: typer.Context, sweep_id: SweepIdArg, as_json: JsonFlag = False) -> None:
    """A sweep's leaderboard: members ranked by the best value of its metric."""
    sweep = api_client(ctx).json("GET", f"/v1/sweeps/{sweep_id}")
    if as_json:
        print_json(sweep)
        return
    print(summary_text(sweep))
    tables.print_rendered(leaderboard_table(sweep))


def summary_text(sweep: dict[str, Any]) -> str:
    lines = [
        f"sweep {sweep['id']} ({sweep['name']}) by {sweep['owner']}: {sweep['status']}"
        + (", held" if sweep["held"] else ""),
        f"  members: {sweep['size']} ({counts_text(sweep['counts'])})"
        + (f", at most {sweep['max_parallel']} at once" if sweep["max_parallel"] else ""),
    ]
    if sweep["metric"]:
        rule = sweep["spec"]["sweep"].get("early_stopping")
        stops = f", early stopping: {rule['rule']} rule" if rule else ""
        lines.append(f"  metric: {sweep['metric']} ({sweep['mode']}){stops}")
    best = sweep.get("best")
    if best:
        lines.append(
            f"  best: job {best['job_id']}, {sweep['metric']} {best['value']:.4g} "
            f"with {params_text(best['params'])}"
        )
    lines += [f"  warning: {w}" for w in sweep["warnings"]]
    if sweep.get("hidden"):
        lines.append(
            f"  hidden from you ({sweep['owner']}'s and admins'): {', '.join(sweep['hidden'])}"
        )
    return "\n".join(lines)


def params_text(params: dict[str, Any]) -> str:
    """`lr=0.001 bs=32`: values as the member's argv got them."""
    return " ".join(f"{k}={param_text(v)}" for k, v in params.items())


def leaderboard_table(sweep: dict[str, Any]) -> Table:
    """One row per member, the best first."""
    names = list(sweep["spec"]["sweep"]["parameters"]) or sorted(
        {n for m in sweep["members"] for n in m["params"]}
    )
    metric = sweep["metric"] or "METRIC"
    rows = []
    for m in sweep["members"]:
        values = [m["params"].get(n) for n in names]
        rows.append(
            (
                m["rank"] if m["rank"] is not None else "-",
                m["job_id"],
                *(param_text(v) for v in values),
                tables.state(m["status"]),
                m["reason"] or "",
                m["epochs"],
                _metric_or_blank(m["best"]),
                _metric_or_blank(m["last"]),
            )
        )
    headers = ["RANK", "JOB", *names, "STATUS", "REASON", "EPOCHS", f"BEST {metric}", "LAST"]
    return tables.table(headers, rows)


def _metric_or_blank(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


@app.command("cancel")
def cancel(ctx: typer.Context, sweep_id: SweepIdArg, as_json: JsonFlag = False) -> None:
    """Cancel a sweep: its queued members at once, its running ones stopped (SIGTERM)."""
    _act(ctx, sweep_id, "cancel", as_json)


@app.command("hold")
def hold(ctx: typer.Context, sweep_id: SweepIdArg, as_json: JsonFlag = False) -> None:
    """Keep a sweep's queued members from starting (running ones go on)."""
    _act(ctx, sweep_id, "hold", as_json)


@app.command("release")
def release(ctx: typer.Context, sweep_id: SweepIdArg, as_json: JsonFlag = False) -> None:
    """Let a held sweep's queued members start again."""
    _act(ctx, sweep_id, "release", as_json)


def _act(ctx: typer.Context, sweep_id: int, action: str, as_json: bool) -> None:
    sweep = api_client(ctx).json("POST", f"/v1/sweeps/{sweep_id}/{action}")
    if as_json:
        print_json(sweep)
        return
    done = {"cancel": "cancelling", "hold": "held", "release": "released"}[action]
    print(f"sweep {sweep_id} {done}: {counts_text(sweep['counts'])}")


def parse_values(text: str) -> list[Any]:
    """`1e-3,1e-4` → [0.001, 0.0001]; `32,64` → [32, 64]; `relu,gelu` stays text."""
    return [_metric_value(part.strip()) for part in text.split(",") if part.strip()]


def _metric_value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def sweep_section(
    values: Sequence[str],
    *,
    max_parallel: int | None,
    metric: str | None,
    mode: str,
    early_stopping: bool,
) -> dict[str, Any]:
    """`gpuq run --sweep lr=1e-3,1e-4 ...` as a spec's `sweep` section (a grid); a
    `ValueError` names what is wrong with a `--sweep`."""
    parameters: dict[str, list[Any]] = {}
    for given in values:
        name, equals, listed = given.partition("=")
        parsed = parse_values(listed)
        if not equals or not name or not parsed:
            raise ValueError(f"{given!r}: write NAME=V1,V2,... (e.g. lr=1e-3,1e-4)")
        if name in parameters:
            raise ValueError(f"{name} is swept twice: give all its values in one --sweep")
        parameters[name] = parsed
    section: dict[str, Any] = {"parameters": parameters, "mode": mode}
    if max_parallel is not None:
        section["max_parallel"] = max_parallel
    if metric is not None:
        section["metric"] = metric
    if early_stopping:
        section["early_stopping"] = {"rule": "median"}
    return section
