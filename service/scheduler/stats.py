"""What only the scheduling process knows: how long its steps take, how long jobs waited,
and its warm pool.

Kept in memory (they start again at zero when the service restarts, as Prometheus
expects of histograms) and exported by `service.prometheus`.
"""

from collections.abc import Iterator

from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from gpuq.contract.processes import resident_bytes
from service.executors import Executor

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

    def collect(self, executor: Executor) -> Iterator[Metric]:
        for histogram in self.histograms():
            yield from histogram.collect()
        yield from standbys(executor)


def standbys(executor: Executor) -> Iterator[Metric]:
    """The warm pool (`GPUQ_WARM_WORKERS`): what it holds while it waits."""
    standbys = executor.standbys()
    if not standbys and executor.own_queue() is not None:
        return  # a cluster's nodes keep no warm pool: no gauge to show
    count = GaugeMetricFamily(
        "gpuq_warm_workers",
        "Training processes started ahead of need for builtin jobs: `ready` (TensorFlow "
        "imported) or `starting`.",
        labels=["state"],
    )
    ready = sum(s.worker_pid is not None for s in standbys)
    count.add_metric(["ready"], ready)
    count.add_metric(["starting"], len(standbys) - ready)
    memory = GaugeMetricFamily(
        "gpuq_warm_workers_memory_bytes",
        "Host memory (resident) the idle warm processes and their runners hold.",
    )
    pids = [p for s in standbys for p in (s.runner_pid, s.worker_pid) if p is not None]
    memory.add_metric([], sum(resident_bytes(pid) or 0 for pid in pids))
    yield from (count, memory)
