"""`gpuq doctor`: checks this box as gpuq will use it (on this machine, no server needed)."""

import sys
from typing import Annotated

import typer
from rich.table import Table

from service.cli.options import JsonFlag, print_json
from service.cli.tables import print_rendered

MARKS = {"pass": "[green]✓[/]", "fail": "[red]✗[/]", "skip": "[dim]-[/]"}


def doctor(
    as_json: JsonFlag = False,
    nodes: Annotated[
        int | None,
        typer.Option(
            "--nodes",
            min=1,
            help="Check N compute nodes of the Slurm partition instead, as a job on N nodes "
            "needs them: gpuq's interpreter, the shared GPUQ_HOME, ports between the nodes.",
        ),
    ] = None,
) -> None:
    """Check the GPUs, the driver, the frameworks and gpuq's caps on this box; exits 1 if
    any check fails. Run it first on a new GPU host."""
    from service.doctor.diagnose import diagnose
    from service.doctor.report import Report
    from service.settings import Settings

    settings = Settings()
    if nodes is not None:
        if settings.executor != "slurm":
            raise typer.BadParameter(
                "checks the compute nodes of a Slurm cluster: this gpuq's executor is "
                f"{settings.executor!r}; set GPUQ_EXECUTOR=slurm",
                param_hint="'--nodes'",
            )
        from service.doctor.nodes import node_checks

        print(f"gpuq doctor: running a probe on {nodes} node(s) with srun…", file=sys.stderr)
        report = Report(simulated=False, checks=node_checks(settings, nodes))
    else:
        report = diagnose(
            settings, say=lambda what: print(f"gpuq doctor: {what}…", file=sys.stderr)
        )
    if as_json:
        print_json(report.to_json())
    else:
        table = Table("", "check", "result", box=None, show_edge=False)
        for check in report.checks:
            result = check.detail + (f"\n[dim]→ {check.hint}[/]" if check.hint else "")
            table.add_row(MARKS[check.status.value], check.name, result)
        print_rendered(table)
        failed = sum(c.status == "fail" for c in report.checks)
        print(f"{failed} check{'s' * (failed != 1)} failed" if failed else "all checks passed")
    raise typer.Exit(0 if report.ok else 1)
