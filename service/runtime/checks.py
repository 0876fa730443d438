"""What a submission must pass before it is stored: can it ever run here, and as its
submitter (their Unix account, the paths they name, command jobs as root, a webhook naming
an internal address)? Asked for each job and each sweep member, and by dry runs."""

from functools import cached_property

from gpuq.contract.spec import JobSpec
from service.addresses import AllowList, check_url
from service.errors import Invalid, Unavailable
from service.executors import Cluster, Node
from service.gpus.inventory import Inventory
from service.host import HostSize, host_size
from service.jobs import admission
from service.jobs.host_share import ShareDefaults
from service.runtime.reservation_check import check_reservation
from service.settings import Settings
from service.snapshots import owns
from service.store.db import Database
from service.team import run_as, users
from service.team.users import Caller

#: why `gpuq shell` cannot run on a cluster, and what to use there
SESSIONS_ON_SLURM = (
    "interactive sessions run on a gpuq box, not through Slurm: on this cluster use "
    "`salloc --gpus=N` (then `srun --pty bash`)"
)


class SubmitChecks:
    def __init__(
        self, settings: Settings, db: Database, inventory: Inventory, cluster: Cluster | None
    ) -> None:
        self.settings = settings
        self.db = db
        self.inventory = inventory
        self.cluster = cluster  #: the nodes of an executor with a queue of its own

    @cached_property
    def box(self) -> HostSize | None:
        """The cores and host memory this box gives jobs; None where a queueing executor
        places them (Slurm: its nodes' sizes are its to judge)."""
        return host_size(self.settings) if self.cluster is None else None

    @cached_property
    def share_defaults(self) -> ShareDefaults:
        """What a job that names no cores or host memory gets here."""
        largest = max((d.memory_total_mb for d in self.inventory.devices), default=0)
        return ShareDefaults.of(self.settings, largest_gpu_mb=largest, box=self.box)

    def check(self, spec: JobSpec, caller: Caller) -> None:
        """Refuses (4xx) what could never run here, or not as `caller`."""
        settings = self.settings
        run_as.check_spec(settings, spec)
        run_as.check_shared(settings, self.db)
        account = run_as.account_for(settings, caller)
        rules = run_as.path_rules(settings, account, has_users=users.has_users(self.db))
        nodes = None
        if self.cluster is not None:
            if spec.kind == "session":
                raise Invalid(("body", "kind"), SESSIONS_ON_SLURM)
            nodes = [node.gpus for node in nodes_of(self.cluster)]
        devices = self.inventory.devices
        admission.check_runnable(
            spec, devices, settings.gpu_headroom_mb, cluster=nodes, rules=rules, box=self.box
        )
        if spec.webhook is not None:
            allow = AllowList.parse(settings.webhook_allow)
            check_url(spec.webhook, allow, ("body", "webhook"))
        check_reservation(self.db, spec, caller.name)
        snapshot = spec.command.snapshot if spec.command is not None else None
        if snapshot is not None and not (caller.admin or owns(self.db, caller.name, snapshot)):
            raise Invalid(
                ("body", "command", "snapshot"),
                f"no snapshot {snapshot[:12]}... of yours is stored here: upload it first "
                "(POST /v1/snapshots; `gpuq run` does), or it was removed after "
                "GPUQ_SNAPSHOT_RETENTION_DAYS unused",
            )


def nodes_of(cluster: Cluster) -> list[Node]:
    """The cluster's nodes; 503 if its executor does not answer."""
    try:
        return cluster.nodes()
    except OSError as exc:
        raise Unavailable(f"cannot ask Slurm for its nodes: {exc}") from exc
