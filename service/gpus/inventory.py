"""Which GPUs this box has, from `GPUQ_GPUS`: NVML, or simulated ones."""

import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from service.gpus.nvml import DeviceReading, GpuProbe, NvmlProbe, NvmlUnavailable

log = logging.getLogger(__name__)

SIM_DEFAULT_MEMORY_MB = 16 * 1024
AUTO_FALLBACK = "sim:2x16GiB"
_SIM = re.compile(r"^sim:(\d+)(?:x(\d+)(MiB|GiB|M|G)?)?$", re.IGNORECASE)


class InventoryError(ValueError):
    """`GPUQ_GPUS` is malformed, or asks for GPUs this host does not have."""


@dataclass(frozen=True)
class Inventory:
    devices: list[DeviceReading]
    #: workers train on simulated devices (logical CPUs) rather than CUDA
    simulated: bool
    #: live readings (NVML, or a test's stand-in); None: nothing to read at run time
    probe: GpuProbe | None
    #: (i, j) with i < j → NVML topology level; lower is closer
    topology: dict[tuple[int, int], int] = field(default_factory=dict)
    #: why `auto` fell back to simulated GPUs (NVML's error), None if it did not
    fallback: str | None = None
    #: GPU index → the CPU cores nearest it (NVML); empty where unknown (simulated GPUs)
    near_cores: dict[int, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def from_probe(cls, probe: GpuProbe, *, simulated: bool) -> "Inventory":
        return cls(
            probe.read(),
            simulated=simulated,
            probe=probe,
            topology=probe.topology(),
            near_cores=probe.near_cores(),
        )

    def describe(self) -> str:
        """The GPUs in a few words (`2x NVIDIA H100 80GB HBM3, 81559 MiB each (NVML)`)."""
        if not self.devices:
            return "none here: Slurm places jobs on the cluster's"
        kinds = Counter((d.name, d.memory_total_mb) for d in self.devices)
        what = "; ".join(f"{n}x {name}, {mb} MiB each" for (name, mb), n in kinds.items())
        return f"{what} (jobs train on CPU devices)" if self.simulated else f"{what} (NVML)"


def parse_sim(value: str) -> list[DeviceReading]:
    """`sim:N` or `sim:NxMEM` (MEM in MiB unless suffixed GiB) → N simulated devices."""
    match = _SIM.match(value.strip())
    if not match:
        raise InventoryError(
            f"GPUQ_GPUS={value!r} is not understood; use auto, nvml, sim:N or sim:NxMEM "
            "(e.g. sim:4x16GiB)"
        )
    count = int(match.group(1))
    if not 1 <= count <= 64:
        raise InventoryError(f"GPUQ_GPUS={value!r}: between 1 and 64 simulated GPUs")
    memory_mb = SIM_DEFAULT_MEMORY_MB
    if match.group(2):
        memory_mb = int(match.group(2))
        if (match.group(3) or "").upper().startswith("G"):
            memory_mb *= 1024
    if not 1024 <= memory_mb <= 1024 * 1024:
        raise InventoryError(f"GPUQ_GPUS={value!r}: memory per GPU must be 1GiB..1024GiB")
    return [
        DeviceReading(
            index=i,
            uuid=f"SIM-{i:08x}-0000-0000-0000-000000000000",
            name="Simulated GPU",
            memory_total_mb=memory_mb,
            memory_used_mb=0,
        )
        for i in range(count)
    ]


def discover(setting: str) -> Inventory:
    """Reads the inventory `setting` asks for; raises `InventoryError` when it cannot."""
    mode = setting.strip().lower()
    if mode.startswith("sim:"):
        return Inventory(parse_sim(mode), simulated=True, probe=None)
    if mode not in {"auto", "nvml"}:
        parse_sim(setting)  # raises with the usage message
    try:
        return Inventory.from_probe(NvmlProbe(), simulated=False)
    except NvmlUnavailable as exc:
        if mode == "nvml":
            raise InventoryError(
                f"GPUQ_GPUS=nvml but {exc}. Check the NVIDIA driver (nvidia-smi) or use "
                "GPUQ_GPUS=sim:N to simulate GPUs."
            ) from exc
        log.warning(
            "NO NVIDIA GPU FOUND (%s): running on SIMULATED GPUs (%s). Jobs train on the CPU "
            "with one logical device per simulated GPU. Set GPUQ_GPUS to choose.",
            exc,
            AUTO_FALLBACK,
        )
        return Inventory(parse_sim(AUTO_FALLBACK), simulated=True, probe=None, fallback=str(exc))
