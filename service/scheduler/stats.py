"""What only the scheduling process knows: how long its steps take and how long jobs waited.

Kept in memory (they start again at zero when the service restarts, as Prometheus
expects of histograms) and exported by `service.prometheus`.
"""

from prometheus_client import Histogram

STEP_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
WAIT_BUCKETS_S = (0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600)


class SchedulerStats:
    def __init__(self) -> None:
        # registry=None: each service owns its own, so several in one process do not clash.
        self.step_seconds = Histogram(
            "gpuq_scheduler_loop_duration_seconds",
            "Time one scheduler step takes (ingest, sample, reap, enforce, drain, place).",
            buckets=STEP_BUCKETS_S,
            registry=None,
        )
        self.queue_wait_seconds = Histogram(
            "gpuq_queue_wait_seconds",
            "Time from submit to launch, for each job's first attempt.",
            buckets=WAIT_BUCKETS_S,
            registry=None,
        )

    def histograms(self) -> list[Histogram]:
        return [self.step_seconds, self.queue_wait_seconds]
