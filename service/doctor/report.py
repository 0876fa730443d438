"""What `gpuq doctor` found: checks that passed, failed or did not apply, and the facts
behind them, as a table for people and JSON for scripts."""

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    passed = "pass"
    failed = "fail"
    skipped = "skip"  #: does not apply here (a framework not installed, one GPU, ...)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    hint: str = ""  #: what to do about a failure

    @classmethod
    def ok(cls, name: str, detail: str) -> "Check":
        return cls(name, Status.passed, detail)

    @classmethod
    def fail(cls, name: str, detail: str, hint: str) -> "Check":
        return cls(name, Status.failed, detail, hint)

    @classmethod
    def skip(cls, name: str, detail: str, hint: str = "") -> "Check":
        return cls(name, Status.skipped, detail, hint)


@dataclass
class Report:
    simulated: bool
    checks: list[Check] = field(default_factory=list)
    driver: dict[str, Any] | None = None  #: NVML's driver and CUDA versions
    gpus: list[dict[str, Any]] = field(default_factory=list)  #: each GPU and its processes
    frameworks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != Status.failed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "simulated": self.simulated,
            "checks": [{**asdict(c), "status": c.status.value} for c in self.checks],
            "driver": self.driver,
            "gpus": self.gpus,
            "frameworks": self.frameworks,
        }
