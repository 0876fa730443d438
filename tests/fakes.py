"""Stand-ins for hardware this machine does not have. Never for gpuq's own code."""

import threading

from service.gpus.nvml import DeviceReading, DriverFacts, GpuFacts, ProcessReading


class FakeNvml:
    """Reports chosen GPUs, per-process memory and topology, as NVML would.

    Processes are set by the test (`put`), e.g. a job's training pid with the memory it
    "holds"; used memory is a baseline plus the processes' memory.
    """

    def __init__(
        self,
        count: int = 2,
        memory_mb: int = 8192,
        topology: dict[tuple[int, int], int] | None = None,
        baseline_mb: int = 0,
        compute_modes: dict[int, str] | None = None,
        mig: dict[int, bool] | None = None,
        near_cores: dict[int, tuple[int, ...]] | None = None,
    ) -> None:
        self.count = count
        self.memory_mb = memory_mb
        self.baseline_mb = baseline_mb
        self._topology = topology or {}
        self._compute_modes = compute_modes or {}
        self._mig = mig or {}
        self._near_cores = near_cores or {}
        self._processes: dict[int, dict[int, int]] = {i: {} for i in range(count)}
        self.utilization: dict[int, int] = {}  #: GPU → percent busy (default 0)
        self._lock = threading.Lock()

    def put(self, gpu: int, pid: int, memory_mb: int) -> None:
        with self._lock:
            self._processes[gpu][pid] = memory_mb

    def remove(self, pid: int) -> None:
        with self._lock:
            for processes in self._processes.values():
                processes.pop(pid, None)

    def read(self) -> list[DeviceReading]:
        with self._lock:
            return [
                DeviceReading(
                    index=i,
                    uuid=f"GPU-fake-{i}",
                    name="Fake GPU",
                    memory_total_mb=self.memory_mb,
                    memory_used_mb=self.baseline_mb + sum(self._processes[i].values()),
                    processes=tuple(ProcessReading(p, m) for p, m in self._processes[i].items()),
                    utilization_pct=self.utilization.get(i, 0),
                )
                for i in range(self.count)
            ]

    def topology(self) -> dict[tuple[int, int], int]:
        return dict(self._topology)

    def near_cores(self) -> dict[int, tuple[int, ...]]:
        return dict(self._near_cores)

    def facts(self) -> DriverFacts:
        return DriverFacts(
            driver_version="580.159.04",
            cuda_version="13.0",
            gpus=tuple(
                GpuFacts(i, self._compute_modes.get(i, "Default"), self._mig.get(i))
                for i in range(self.count)
            ),
        )
