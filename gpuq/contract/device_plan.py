"""A job's device plan: which GPUs it got and how TensorFlow must configure them.

The service decides it at placement and writes it into `spec.json`; the training process
and the start-up hook of a `command` job (through `GPUQ_DEVICES`) apply it. Standard
library only: the hook loads it inside the user's program.
"""

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

#: The environment variable that carries a `DevicePlan` to a `command` job's hook.
ENV = "GPUQ_DEVICES"


@dataclass(frozen=True)
class DevicePlan:
    mode: Literal["gpu", "sim", "cpu"]  #: real GPUs, simulated GPUs, or no GPU
    indices: tuple[int, ...] = ()  #: the GPUs assigned (NVML indices); empty for a CPU job
    memory_limit_mb: int | None = None  #: TensorFlow's cap per logical GPU, headroom taken off
    memory_growth: bool = False
    replicas_per_gpu: int = 1  #: logical GPUs made from each assigned GPU
    #: the smallest assigned GPU's total memory (NVML), for caps given as fractions (JAX);
    #: None where unknown (a CPU job, a Slurm node, a `spec.json` from before it existed)
    memory_total_mb: int | None = None

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def replicas(self) -> int:
        return max(self.count, 1) * self.replicas_per_gpu

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DevicePlan":
        return cls(**{**data, "indices": tuple(data.get("indices") or ())})

    @classmethod
    def from_json(cls, text: str) -> "DevicePlan":
        return cls.from_dict(json.loads(text))

    @classmethod
    def cpu(cls) -> "DevicePlan":
        return cls(mode="cpu")
