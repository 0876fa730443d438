"""The shapes the API returns (pydantic), built from the tables in `service.store.tables`:
one module per thing shown (`jobs`, `sweeps`, `gpus`, ...), all of them importable from here."""

from service.public.artifacts import ArtifactList, ArtifactPublic
from service.public.audit import AuditPage, AuditPublic
from service.public.gpus import (
    AllocationPublic,
    DrainPublic,
    ForeignProcess,
    GpuNodePublic,
    GpuPublic,
    MaintenancePublic,
)
from service.public.host import HostJobPublic, HostPublic
from service.public.jobs import (
    AttemptPublic,
    JobEvent,
    JobPage,
    JobPublic,
    NodePublic,
    PlacementViolation,
    Progress,
    readable_metrics,
    readable_progress,
)
from service.public.metrics import EpochMetrics, MetricHistory, StepMetrics
from service.public.previews import Preview, VictimPublic
from service.public.sweeps import (
    SweepBest,
    SweepCurve,
    SweepCurves,
    SweepMember,
    SweepPage,
    SweepPublic,
    SweepSummary,
)
from service.public.webhooks import (
    DeliveryAttemptPublic,
    WebhookDeliveryList,
    WebhookDeliveryPublic,
    WebhookPublic,
)

__all__ = [
    "AllocationPublic",
    "ArtifactList",
    "ArtifactPublic",
    "AttemptPublic",
    "AuditPage",
    "AuditPublic",
    "DeliveryAttemptPublic",
    "DrainPublic",
    "EpochMetrics",
    "ForeignProcess",
    "GpuNodePublic",
    "GpuPublic",
    "HostJobPublic",
    "HostPublic",
    "JobEvent",
    "JobPage",
    "JobPublic",
    "MaintenancePublic",
    "MetricHistory",
    "NodePublic",
    "PlacementViolation",
    "Preview",
    "Progress",
    "StepMetrics",
    "SweepBest",
    "SweepCurve",
    "SweepCurves",
    "SweepMember",
    "SweepPage",
    "SweepPublic",
    "SweepSummary",
    "VictimPublic",
    "WebhookDeliveryList",
    "WebhookDeliveryPublic",
    "WebhookPublic",
    "readable_metrics",
    "readable_progress",
]
