"""`gpuq gpus`: the GPUs, their memory and jobs; `gpuq gpus release INDEX` puts a draining
or quarantined GPU back into use."""

from typing import Annotated

import typer

from service.cli import tables
from service.cli.options import JsonFlag, api_client, print_json

app = typer.Typer(
    name="gpus",
    help="GPUs, their memory and jobs; `gpus release INDEX` frees a held-back one.",
    invoke_without_command=True,
    subcommand_metavar="[COMMAND] [ARGS]...",
)


@app.callback()
def gpus(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """GPUs, their memory and jobs (`gpuq gpus release INDEX` frees a held-back GPU)."""
    if ctx.invoked_subcommand is not None:
        return
    listed = api_client(ctx).json("GET", "/v1/gpus")
    if as_json:
        print_json(listed)
    else:
        tables.print_rendered(tables.gpus_table(listed))


@app.command("release")
def release(
    ctx: typer.Context,
    index: Annotated[int, typer.Argument(metavar="INDEX", help="The GPU's index, as listed.")],
    as_json: JsonFlag = False,
) -> None:
    """Put a draining or quarantined GPU back into use (admins)."""
    gpu = api_client(ctx).json("POST", f"/v1/gpus/{index}/release")
    if as_json:
        print_json(gpu)
    else:
        print(f"released: {tables.gpu_line(gpu)}")
