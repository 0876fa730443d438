"""`gpuq diff A B`: what changed between two jobs: their specs, and their code (the files of
their snapshots, and a unified diff of each changed one)."""

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from service.cli.code_diff import FileChanges, compare_files, compare_specs, files_of
from service.cli.options import JsonFlag, api_client, print_json

JobA = Annotated[int, typer.Argument(metavar="A", help="A job's id.", show_default=False)]
JobB = Annotated[int, typer.Argument(metavar="B", help="Another's.", show_default=False)]


def diff(ctx: typer.Context, first: JobA, second: JobB, as_json: JsonFlag = False) -> None:
    """What changed from job A to job B: their specs, and their code (the files of their
    snapshots, with a unified diff of each changed one). Exits 1 if they differ."""
    client = api_client(ctx)
    jobs = [client.json("GET", f"/v1/jobs/{job_id}") for job_id in (first, second)]
    specs = compare_specs(jobs[0]["spec"], jobs[1]["spec"])
    snapshots = [(job["spec"].get("command") or {}).get("snapshot") for job in jobs]
    files = None
    if all(snapshots) and snapshots[0] != snapshots[1]:
        with tempfile.TemporaryDirectory(prefix="gpuq-diff-") as tmp:
            contents = []
            for sha in snapshots:
                target = Path(tmp) / f"{sha}.tar"
                client.download(f"/v1/snapshots/{sha}/tar", target)
                contents.append(files_of(target))
        files = compare_files(*contents)
    elif all(snapshots):
        files = FileChanges()
    if as_json:
        print_json(_as_json(specs, files, snapshots))
    else:
        print(_as_text(first, second, specs, files, snapshots), end="")
    if specs or (files is not None and (files.added or files.removed or files.changed)):
        raise typer.Exit(1)


def _as_text(
    first: int,
    second: int,
    specs: list[tuple[str, Any, Any]],
    files: FileChanges | None,
    snapshots: list[str | None],
) -> str:
    out = [f"job {first} → job {second}"]
    out.append("spec: the same" if not specs else "spec:")
    out += [f"  {name}: {json.dumps(a)} → {json.dumps(b)}" for name, a, b in specs]
    if files is None:
        without = [str(j) for j, sha in zip((first, second), snapshots, strict=True) if not sha]
        out.append(f"code: not compared: job {' and job '.join(without)} ran without a snapshot")
    elif not (files.added or files.removed or files.changed):
        out.append(f"code: the same (snapshot {str(snapshots[0])[:12]})")
    else:
        out.append(f"code: snapshot {str(snapshots[0])[:12]} → {str(snapshots[1])[:12]}")
        out += [f"  added    {n}" for n in files.added]
        out += [f"  removed  {n}" for n in files.removed]
        out += [f"  changed  {n}" for n in files.changed]
    return "\n".join(out) + "\n" + ("".join(files.text) if files else "")


def _as_json(
    specs: list[tuple[str, Any, Any]], files: FileChanges | None, snapshots: list[str | None]
) -> dict[str, Any]:
    return {
        "spec": [{"field": name, "a": a, "b": b} for name, a, b in specs],
        "snapshots": snapshots,
        "files": None
        if files is None
        else {"added": files.added, "removed": files.removed, "changed": files.changed},
        "diff": None if files is None else "".join(files.text),
    }
