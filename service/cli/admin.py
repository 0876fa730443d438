"""`gpuq admin drain|resume|status`: maintenance drains of the whole box or single GPUs."""

from collections.abc import Sequence
from typing import Annotated, Any

import typer

from service.cli.options import JsonFlag, api_client, print_json

app = typer.Typer(
    name="admin",
    help="Maintenance: drain the box or single GPUs (running jobs finish), resume.",
    no_args_is_help=True,
)

GpuOption = Annotated[
    list[int] | None,
    typer.Option("--gpu", metavar="N", help="Only this GPU (repeatable); default: the whole box."),
]


@app.command("drain")
def drain(
    ctx: typer.Context,
    gpu: GpuOption = None,
    reason: Annotated[str | None, typer.Option(help="Why, for the users whose jobs wait.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Start nothing new on the box (or --gpu N) until resumed; running jobs finish (admins)."""
    body = {"gpus": gpu or None, "reason": reason}
    _print(api_client(ctx).json("POST", "/v1/admin/drain", json=body), as_json)


@app.command("resume")
def resume(ctx: typer.Context, gpu: GpuOption = None, as_json: JsonFlag = False) -> None:
    """End every drain, or only that of --gpu N (admins)."""
    _print(api_client(ctx).json("POST", "/v1/admin/resume", json={"gpus": gpu or None}), as_json)


@app.command("status")
def status(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """What is drained, by whom, since when and why."""
    _print(api_client(ctx).json("GET", "/v1/admin/drain"), as_json)


def _print(drains: Sequence[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(drains)
        return
    if not drains:
        print("nothing is drained")
    for d in drains:
        what = "the box" if d["gpu"] is None else f"GPU {d['gpu']}"
        since = d["since"][:16].replace("T", " ")
        why = f": {d['reason']}" if d["reason"] else ""
        print(f"{what} is drained by {d['by']} since {since} UTC{why}")
