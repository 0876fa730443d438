"""Everything `placement.plan` reads, gathered in one place (by `snapshot`), for the plan,
preemption (`preempt`) and dry runs to share."""

from dataclasses import dataclass, field

from service.scheduler.bookings import Booking
from service.scheduler.gpu_choice import Policy, Topology
from service.scheduler.host_room import HostRoom
from service.scheduler.occupancy import Claim, GpuSlot
from service.scheduler.placement import Plan, Request, plan


@dataclass
class PlanInputs:
    """Everything `plan` reads, gathered by the scheduler in one place."""

    queue: list[Request]
    gpus: list[GpuSlot]
    allocations: list[Claim]
    cpu_slots: int = 0
    topology: Topology = field(default_factory=dict)
    now: float = 0.0
    grace_s: float = 0.0
    usage: dict[str, float] = field(default_factory=dict)
    running_gpus: dict[str, int] = field(default_factory=dict)
    max_gpus_running: int | None = None
    sweep_limits: dict[int, int] = field(default_factory=dict)
    sweep_running: dict[int, int] = field(default_factory=dict)
    #: the box's cores and host memory; None where they are not counted (Slurm)
    room: HostRoom | None = None
    #: which GPUs a shared job prefers (`GPUQ_PLACEMENT`)
    placement: Policy = "balanced"
    #: the reservations not over
    bookings: list[Booking] = field(default_factory=list)

    def plan(self) -> Plan:
        return plan(
            self.queue,
            self.gpus,
            self.allocations,
            self.cpu_slots,
            self.topology,
            now=self.now,
            grace_s=self.grace_s,
            usage=self.usage,
            running_gpus=self.running_gpus,
            max_gpus_running=self.max_gpus_running,
            sweep_limits=self.sweep_limits,
            sweep_running=self.sweep_running,
            room=self.room,
            placement=self.placement,
            bookings=self.bookings,
        )
