"""`gpuq artifacts ID [NAME]`: list a job's files, or download one."""

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuq.http import Client
from service.cli import tables
from service.cli.options import JobIdArg, JsonFlag, api_client, print_json


def artifacts(
    ctx: typer.Context,
    job_id: JobIdArg,
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The file to download, e.g. model.keras."),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Where to save it (default: its name; - stdout)."),
    ] = None,
    attempt: Annotated[int | None, typer.Option(help="An earlier attempt's files.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List a job's files, or download one."""
    params: dict[str, Any] = {"attempt": attempt} if attempt else {}
    api = api_client(ctx)
    if name is None:
        _list(api, job_id, params, as_json=as_json)
        return
    target = output or name.rsplit("/", 1)[-1]
    path = f"/v1/jobs/{job_id}/artifacts/{name}"
    if target == "-":
        for chunk in api.stream(path, **params):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        return
    size = api.download(path, Path(target), **params)
    if as_json:
        print_json({"job_id": job_id, "name": name, "path": target, "size_bytes": size})
    else:
        print(f"saved {name} ({size:,} bytes) to {target}")


def _list(api: Client, job_id: int, params: dict[str, Any], *, as_json: bool) -> None:
    listing = api.json("GET", f"/v1/jobs/{job_id}/artifacts", params=params)
    if as_json:
        print_json(listing)
    elif not listing["artifacts"]:
        print(f"job {job_id} has no files (yet)")
    else:
        tables.print_rendered(tables.artifacts_table(listing["artifacts"]))
