"""`gpuq reserve` (book GPUs for a window; `--change`, `--delete`) and `gpuq reservations`
(what is booked)."""

from datetime import datetime
from typing import Annotated, Any

import typer

from service.cli import tables, units
from service.cli.options import JsonFlag, api_client, print_json
from service.cli.run_options import parse_gpu_ids, read_as_option
from service.scheduler.bookings import gpu_list

Moment = Annotated[
    datetime | None,
    typer.Option(
        "--from",
        parser=read_as_option(units.parse_moment),
        metavar="TIME",
        help="When it opens: 'fri 09:00', 'tomorrow 14:00', 18:00, +2h, an ISO time. Default: now.",
    ),
]
For = Annotated[
    float | None,
    typer.Option(
        "--for",
        parser=read_as_option(units.seconds),
        metavar="DURATION",
        help="How long: 8h, 90m, 1d.",
    ),
]
Until = Annotated[
    datetime | None,
    typer.Option(
        parser=read_as_option(units.parse_moment), metavar="TIME", help="Or when it ends."
    ),
]
Names = Annotated[str | None, typer.Option(metavar="ana,bo", help="Who may use it. Default: you.")]


def reserve(
    ctx: typer.Context,
    name: Annotated[
        str | None, typer.Option(help="What jobs name it by (`--reservation paper`).")
    ] = None,
    gpus: Annotated[int | None, typer.Option(min=1, help="How many GPUs (gpuq picks).")] = None,
    gpu_ids: Annotated[
        str | None, typer.Option("--gpu-ids", metavar="0,2", help="Or which GPUs.")
    ] = None,
    starts: Moment = None,
    duration: For = None,
    until: Until = None,
    users: Names = None,
    group: Annotated[str | None, typer.Option(help="A Unix group whose members may too.")] = None,
    cpus: Annotated[
        float | None, typer.Option(metavar="N", help="Cores others leave free in it.")
    ] = None,
    host_mem: Annotated[
        int | None,
        typer.Option(
            "--host-mem",
            parser=read_as_option(units.mebibytes),
            metavar="SIZE",
            help="Host memory others leave free in it, e.g. 32G.",
        ),
    ] = None,
    change: Annotated[
        str | None,
        typer.Option(metavar="ID|NAME", help="Change this one: --from, --for, --until, --users."),
    ] = None,
    delete: Annotated[str | None, typer.Option(metavar="ID|NAME", help="End this one now.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Book GPUs for a window, for you or a list of users: `gpuq reserve --gpus 4 --from
    'fri 09:00' --for 8h --users ana,bo --name paper`. Inside the window its users' jobs run
    on them; before it, others' jobs use them only if their --time ends first."""
    if until is not None and duration is not None:
        raise typer.BadParameter("give --for or --until, not both", param_hint="'--until'")
    client = api_client(ctx)
    window = _window_asked(starts, duration, until)
    people: dict[str, Any] = {"users": users.split(",")} if users else {}
    people |= {"group": group} if group else {}
    if delete is not None:
        shown = client.json("DELETE", f"/v1/reservations/{delete}")
    elif change is not None:
        if not (window or people):
            raise typer.BadParameter(
                "say what changes", param_hint="'--from/--for/--until/--users'"
            )
        shown = client.json("PATCH", f"/v1/reservations/{change}", json=window | people)
    else:
        sized = {"cpus": cpus, "host_memory_mb": host_mem}
        body = _booking(name, gpus, gpu_ids, duration or until, window | people | sized)
        shown = client.json("POST", "/v1/reservations", json=body)
    if as_json:
        print_json(shown)
    else:
        print(reservation_sentence(shown))


def _booking(
    name: str | None, gpus: int | None, gpu_ids: str | None, length: object, given: dict[str, Any]
) -> dict[str, Any]:
    """`POST /v1/reservations`'s body; a bad or missing option exits 2 naming it."""
    if name is None:
        raise typer.BadParameter("name it: jobs use it by its name", param_hint="'--name'")
    if (gpus is None) == (gpu_ids is None):
        raise typer.BadParameter("give --gpus N or --gpu-ids 0,1", param_hint="'--gpus'")
    if length is None:
        raise typer.BadParameter("how long? give --for 8h or --until TIME", param_hint="'--for'")
    body: dict[str, Any] = {"name": name} | {k: v for k, v in given.items() if v}
    body.setdefault("starts_at", units.parse_moment("now").isoformat())
    if gpu_ids is None:
        return body | {"gpus": gpus}
    try:
        return body | {"gpu_ids": parse_gpu_ids(gpu_ids)}
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'--gpu-ids'") from None


def _window_asked(
    starts: datetime | None, duration: float | None, until: datetime | None
) -> dict[str, Any]:
    window: dict[str, Any] = {}
    if starts is not None:
        window["starts_at"] = starts.isoformat()
    if duration is not None:
        window["duration_s"] = duration
    if until is not None:
        window["ends_at"] = until.isoformat()
    return window


def reservations(
    ctx: typer.Context,
    everything: Annotated[bool, typer.Option("--all", help="Ended and released ones too.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """The reservations booked (open or to come; --all for every one): GPUs, users, window."""
    listed = api_client(ctx).json("GET", "/v1/reservations", params={"all": everything})
    if as_json:
        print_json(listed)
        return
    rows = [_listed_row(r) for r in listed]
    headers = ["ID", "NAME", "GPUS", "USERS", "WINDOW (LOCAL TIME)", "STATE", "OWNER"]
    if rows:
        tables.print_rendered(tables.table(headers, rows))
    else:
        print("no reservations" + ("" if everything else " open or to come (--all: every one)"))


def _listed_row(r: dict[str, Any]) -> tuple[Any, ...]:
    users = ", ".join(r["users"])
    return r["id"], r["name"], _gpus_booked(r), users, _when(r), r["state"], r["owner"]


def reservation_sentence(r: dict[str, Any]) -> str:
    """`reservation 3 paper: GPUs 0-3 for ana, bo, Fri 12-04 09:00 → 17:00 (32 GPU-hours),
    upcoming`."""
    starts, ends = (datetime.fromisoformat(r[k]) for k in ("starts_at", "ends_at"))
    hours = r["gpus"] * (ends - starts).total_seconds() / 3600
    who = ", ".join(r["users"]) + (f", group {r['group']}" if r["group"] else "")
    said = f"reservation {r['id']} {r['name']}: {_gpus_booked(r)} for {who}, {_when(r)} "
    said += f"({hours:.3g} GPU-hours), {r['state']}"
    if r.get("released_why"):
        said += f": {r['released_why']}"
    if r.get("slurm_reservation"):
        said += f"; in Slurm: {r['slurm_reservation']}"
    return said


def _gpus_booked(r: dict[str, Any]) -> str:
    return gpu_list(r["gpu_indices"]) if r["gpu_indices"] else f"{r['gpus']} GPUs"


def _when(r: dict[str, Any]) -> str:
    starts, ends = (datetime.fromisoformat(r[k]).astimezone() for k in ("starts_at", "ends_at"))
    end = f"{ends:%H:%M}" if ends.date() == starts.date() else f"{ends:%a %m-%d %H:%M}"
    return f"{starts:%a %m-%d %H:%M} → {end}"
