"""The one place that talks to NVML; everything else sees `DeviceReading`s.

Tests use a stand-in with the same methods (`read`, `topology`, `facts`) that reports chosen
processes and memory, since CI has no GPU.
"""

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

MIB = 1024 * 1024

#: NVML topology levels, closest first (nvmlGpuTopologyLevel_t); NVLink is closer still.
NVLINK = 0
TOPOLOGY_NAMES = {
    0: "NVLink",
    10: "same board",
    20: "same PCIe switch",
    30: "same PCIe host bridge",
    40: "same NUMA node",
    50: "across NUMA nodes",
}


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    memory_mb: int


@dataclass(frozen=True)
class DeviceReading:
    index: int
    uuid: str
    name: str
    memory_total_mb: int
    memory_used_mb: int
    processes: tuple[ProcessReading, ...] = field(default=())
    utilization_pct: int | None = None


@dataclass(frozen=True)
class GpuFacts:
    """What `gpuq doctor` shows of a GPU beside its readings."""

    index: int
    compute_mode: str  #: `Default`, `Exclusive_Process` or `Prohibited`
    mig: bool | None  #: MIG mode on; None where the GPU has no MIG


@dataclass(frozen=True)
class DriverFacts:
    driver_version: str
    cuda_version: str  #: the newest CUDA the driver supports, e.g. `13.0`
    gpus: tuple[GpuFacts, ...]


#: NVML's compute modes (nvmlComputeMode_t); 1 (exclusive thread) is long gone.
COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


class GpuProbe(Protocol):
    def read(self) -> list[DeviceReading]:
        """Current memory, utilisation and compute processes of every GPU, by NVML index."""
        ...

    def topology(self) -> dict[tuple[int, int], int]:
        """For each pair of GPU indices (i < j), how close they are: a level above, lower
        is closer."""
        ...

    def facts(self) -> DriverFacts:
        """The driver's versions and each GPU's compute and MIG modes."""
        ...

    def near_cores(self) -> dict[int, tuple[int, ...]]:
        """For each GPU index, the CPU cores nearest it (its NUMA node's: NVML's ideal
        affinity); a GPU NVML says nothing of is left out."""
        ...


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or found no GPU."""


class NvmlProbe:
    """Reads GPUs through `nvidia-ml-py`; construction fails with `NvmlUnavailable`."""

    def __init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except Exception as exc:  # the library raises NVMLError subclasses or OSError
            raise NvmlUnavailable(f"NVML is not usable here: {exc}") from exc
        if count == 0:
            raise NvmlUnavailable("NVML found no GPU")
        self._nvml: Any = pynvml

    def read(self) -> list[DeviceReading]:
        nvml = self._nvml
        readings = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            processes = tuple(
                ProcessReading(p.pid, (p.usedGpuMemory or 0) // MIB)
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            )
            try:
                utilization: int | None = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
            except nvml.NVMLError:
                utilization = None
            readings.append(
                DeviceReading(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_total_mb=memory.total // MIB,
                    memory_used_mb=memory.used // MIB,
                    processes=processes,
                    utilization_pct=utilization,
                )
            )
        return readings

    def topology(self) -> dict[tuple[int, int], int]:
        nvml = self._nvml
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        levels = {}
        for i, j in itertools.combinations(range(len(handles)), 2):
            try:
                level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j]))
            except nvml.NVMLError:
                level = max(TOPOLOGY_NAMES)
            if self._nvlinked(handles[i], j):
                level = NVLINK
            levels[(i, j)] = level
        return levels

    def near_cores(self) -> dict[int, tuple[int, ...]]:
        nvml = self._nvml
        words = -(-(os.cpu_count() or 1) // 64)  # NVML's mask: 64 cores to a word
        near = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                mask = nvml.nvmlDeviceGetCpuAffinity(nvml.nvmlDeviceGetHandleByIndex(index), words)
            except nvml.NVMLError:
                continue
            near[index] = cores_in(mask)
        return near

    def facts(self) -> DriverFacts:
        nvml = self._nvml
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mode = nvml.nvmlDeviceGetComputeMode(handle)
            try:
                mig: bool | None = nvml.nvmlDeviceGetMigMode(handle)[0] == 1
            except nvml.NVMLError:  # not supported: a GPU without MIG
                mig = None
            gpus.append(GpuFacts(index, COMPUTE_MODES.get(mode, f"mode {mode}"), mig))
        cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()  # e.g. 13000
        return DriverFacts(
            driver_version=_text(nvml.nvmlSystemGetDriverVersion()),
            cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=tuple(gpus),
        )

    def _nvlinked(self, handle: Any, other: int) -> bool:
        nvml = self._nvml
        other_bus = nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(other)).busId
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
                if nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId == other_bus:
                    return True
            except nvml.NVMLError:
                return False  # no NVLink on this GPU, or no more links
        return False


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def cores_in(mask: Sequence[int]) -> tuple[int, ...]:
    """The cores an NVML CPU mask names: word `w`'s bit `b` is core `64 * w + b`."""
    return tuple(
        64 * w + bit for w, bits in enumerate(mask) for bit in range(64) if bits >> bit & 1
    )
