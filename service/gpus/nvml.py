"""The one place that talks to NVML; everything else sees `DeviceReading`s."""

from dataclasses import dataclass, field
from typing import Protocol

MIB = 1024 * 1024


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


class GpuProbe(Protocol):
    def read(self) -> list[DeviceReading]:
        """Current memory and compute processes of every GPU, by NVML index."""
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
        self._nvml = pynvml

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
            readings.append(
                DeviceReading(
                    index=index,
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    memory_total_mb=memory.total // MIB,
                    memory_used_mb=memory.used // MIB,
                    processes=processes,
                )
            )
        return readings


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
