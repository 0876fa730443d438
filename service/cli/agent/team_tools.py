"""The tools on the box and the team: GPUs now, the queue with its wait reasons, sweeps,
usage; and for admins only, drains and the audit log."""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gpuq.client import Drain, Gpuq, Sweep
from gpuq.contract.sweep import SweepSpec
from service.cli.agent.answers import WaitingJob
from service.cli.agent.tooling import CHANGES, DESTROYS, READS, add_tools

SweepId = Annotated[int, Field(ge=1, le=2**53, description="The sweep's id.")]
GpuIndex = Annotated[int, Field(ge=0, le=1023)]
#: the most queued jobs one call lists
QUEUE_MAX = 500


def add_team_tools(mcp: MCPServer, gq: Gpuq, *, admin: bool) -> None:
    """Adds the tools every member has, and with `admin` the admins' too; these are never
    listed to anyone else."""
    tools = TeamTools(gq)
    reads = (tools.gpus, tools.queue, tools.list_sweeps, tools.sweep_leaderboard, tools.usage)
    add_tools(mcp, READS, *reads)
    add_tools(mcp, CHANGES, tools.create_sweep)
    add_tools(mcp, DESTROYS, tools.cancel_sweep)
    if admin:
        add_tools(mcp, READS, tools.audit_log)
        add_tools(mcp, CHANGES, tools.drain_gpus, tools.resume_gpus)


class TeamTools:
    """The box's and the team's tools for the user behind `gq`, a method a tool."""

    def __init__(self, gq: Gpuq) -> None:
        self.gq = gq

    def gpus(self) -> list[dict[str, Any]]:
        """The box's GPUs now: memory used and free, state (free, in_use, draining), and the
        jobs on each. Use it to choose how many GPUs and how much memory to ask for."""
        return self.gq.gpus()

    def queue(self) -> list[WaitingJob]:
        """Everyone's queued jobs in the order they will start, each with why it waits
        (its `wait_reason`, e.g. `waiting for 2 GPUs: ...`)."""
        params = {"status": "queued", "limit": QUEUE_MAX}
        page = self.gq.http.json("GET", "/v1/jobs", params=params)
        queued = [
            WaitingJob(
                id=j["id"],
                name=j["name"],
                owner=j["owner"],
                position=j.get("queue_position"),
                held=j.get("held", False),
                wait_reason=j.get("wait_reason"),
            )
            for j in page["jobs"]
        ]
        return sorted(queued, key=lambda q: (q.position is None, q.position or 0, q.id))

    def create_sweep(self, spec: SweepSpec) -> Sweep:
        """Queue a sweep from a full spec: a job spec with a `sweep` section (grid, list or
        random search, a metric to rank by, early stopping). run_command's `sweep` argument
        is the short way for a program's grid."""
        return self.gq.submit_sweep(spec)

    def list_sweeps(
        self, owner: str | None = None, limit: Annotated[int, Field(ge=1, le=100)] = 20
    ) -> list[Sweep]:
        """Sweeps, newest first, without their members (sweep_leaderboard has them)."""
        return self.gq.sweeps(owner=owner, limit=limit)

    def sweep_leaderboard(
        self, sweep_id: SweepId, top: Annotated[int, Field(ge=1, le=500)] = 20
    ) -> Sweep:
        """A sweep now with its members ranked by its metric, the best first (the `top` of
        them), each with its parameter values, state, epochs, best and last value."""
        sweep = self.gq.sweep(sweep_id)
        return sweep.model_copy(update={"members": sweep.members[:top]})

    def cancel_sweep(self, sweep_id: SweepId) -> Sweep:
        """Cancel a sweep: its queued members at once, running ones with SIGTERM. It cannot
        be resumed as it was."""
        return self.gq.cancel_sweep(sweep_id)

    def usage(
        self,
        since: str | None = None,
        until: str | None = None,
        by: Literal["owner", "day", "gpu"] = "owner",
    ) -> dict[str, Any]:
        """GPU-hours used, jobs by outcome, GPU-hours lost to failures and queue waits over a
        period (`since`/`until`: `7d`, `24h`, `now`, an ISO time; default the last 7 days),
        a row per owner, day or GPU. Members see their own rows."""
        return self.gq.usage(since=since, until=until, by=by)

    def drain_gpus(
        self,
        gpus: list[GpuIndex] | None = None,
        reason: Annotated[str, Field(max_length=500)] | None = None,
    ) -> list[Drain]:
        """Start nothing new on these GPUs (none given: the whole box) until resume_gpus;
        running jobs finish. For maintenance. Admins only."""
        return self.gq.drain(gpus, reason)

    def resume_gpus(self, gpus: list[GpuIndex] | None = None) -> list[Drain]:
        """End the drains of these GPUs (none given: every drain), so jobs start there
        again. Admins only."""
        return self.gq.resume(gpus)

    def audit_log(
        self, limit: Annotated[int, Field(ge=1, le=200)] = 50, cursor: str | None = None
    ) -> dict[str, Any]:
        """Who changed what, newest first, a page at a time (`next_cursor`). Admins only."""
        return self.gq.audit(limit=limit, cursor=cursor)
