"""No fences: the box where gpuq cannot (or was told not to) put jobs in cgroups. Every
job runs as it would without gpuq's fences, held only by the GPU memory caps."""

from service.executors.fences.shapes import FenceLimits, FenceUsage


class NoFences:
    """Fences that fence nothing, and say why (`why_none`)."""

    kind = "none"
    location: str | None = None
    devices_fenced = False

    def __init__(self, why_none: str) -> None:
        self.why_none: str | None = why_none

    def make(self, name: str, limits: FenceLimits) -> tuple[str, ...]:
        return ()

    def members(self, name: str) -> list[int]:
        return []

    def signal(self, name: str, sig: int) -> None:
        pass

    def kill(self, name: str) -> None:
        pass

    def usage(self, name: str) -> FenceUsage | None:
        return None

    def remove(self, name: str) -> bool:
        return True

    def names(self) -> list[str]:
        return []

    def close(self) -> None:
        pass
