"""Probing each GPU as a job would use it: a child given GPU i lands on NVML's GPU i and on
no other, stays under the cap gpuq sets, is refused past it, and leaves nothing behind."""

import time
from dataclasses import dataclass

from gpuq.contract.device_plan import ENV, DevicePlan
from service.doctor.child import ProbeChild, ProbeFailed, probe_environment
from service.doctor.frameworks import NAMES
from service.doctor.report import Check
from service.gpus.nvml import DeviceReading, GpuProbe

#: The cap a probe runs under; it holds about half of what the framework may use.
PROBE_CAP_MB = 4096
STEP_TIMEOUT_S = 180.0
#: How long NVML may take to show a GPU free again after the probe exits.
RELEASE_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Probe:
    framework: str
    gpu: DeviceReading  #: as read before the probe
    headroom_mb: int
    slack_mb: int  #: used memory that may stay unaccounted for (`GPUQ_DRAIN_SLACK_MB`)

    @property
    def label(self) -> str:
        return f"GPU {self.gpu.index} ({NAMES[self.framework]})"

    @property
    def limit_mb(self) -> int:
        """What the framework is told it may use: the cap less gpuq's headroom."""
        return PROBE_CAP_MB - self.headroom_mb

    @property
    def plan(self) -> DevicePlan:
        return DevicePlan(
            mode="gpu",
            indices=(self.gpu.index,),
            memory_limit_mb=self.limit_mb,
            memory_total_mb=self.gpu.memory_total_mb,
        )


def probe(nvml: GpuProbe, job: Probe) -> list[Check]:
    """Runs one probe child on `job.gpu` and judges what NVML saw of it."""
    free = job.gpu.memory_total_mb - job.gpu.memory_used_mb
    if free < PROBE_CAP_MB + job.slack_mb:
        return [Check.skip(f"{job.label}", f"only {free} MiB free; the probe needs {PROBE_CAP_MB}")]
    under_mb = job.limit_mb // 2
    env = probe_environment(job.plan, {ENV: job.plan.to_json()})
    checks = []
    with ProbeChild("alloc", job.framework, str(under_mb), str(PROBE_CAP_MB), env=env) as child:
        try:
            allocated = child.read(STEP_TIMEOUT_S)
            pid = int(allocated["pid"])
            checks += judge_held(nvml.read(), job, pid, under_mb)
            child.go_on()
            over = child.read(STEP_TIMEOUT_S)
            checks.append(judge_over(job, over, nvml.read(), pid))
            child.go_on()
            child.finish(STEP_TIMEOUT_S)
        except ProbeFailed as exc:
            return [
                *checks,
                Check.fail(
                    f"{job.label} probe",
                    f"the probe failed: {exc}",
                    "run `python -m worker.probe info "
                    f"{job.framework}` to see the framework's own error",
                ),
            ]
    checks.append(judge_released(nvml, job, pid))
    return checks


def judge_held(readings: list[DeviceReading], job: Probe, pid: int, asked_mb: int) -> list[Check]:
    """Index agreement (the probe on its GPU alone) and the cap (NVML's figure under it)."""
    seen = {r.index: p.memory_mb for r in readings for p in r.processes if p.pid == pid}
    index = job.gpu.index
    name = f"{job.label} index"
    if not seen:
        return [
            Check.fail(
                name,
                f"NVML does not list the probe (pid {pid}) on any GPU",
                "gpuq must see the host's processes: in a container, run it with `pid: host`",
            )
        ]
    if set(seen) != {index}:
        others = ", ".join(str(i) for i in sorted(seen))
        return [
            Check.fail(
                name,
                f"CUDA_VISIBLE_DEVICES={index} landed on NVML GPU {others}",
                "CUDA and NVML number the GPUs differently: keep CUDA_DEVICE_ORDER=PCI_BUS_ID",
            )
        ]
    uuid = next(r.uuid for r in readings if r.index == index)
    checks = [Check.ok(name, f"CUDA_VISIBLE_DEVICES={index} landed on {uuid} alone")]
    held = seen[index]
    detail = f"held {held} MiB for {asked_mb} MiB of data, cap {PROBE_CAP_MB} MiB"
    if held <= PROBE_CAP_MB:
        checks.append(Check.ok(f"{job.label} cap", detail))
    else:
        checks.append(
            Check.fail(
                f"{job.label} cap",
                detail,
                "the CUDA context alone is over the cap: raise GPUQ_GPU_HEADROOM_MB",
            )
        )
    return checks


def judge_over(
    job: Probe, said: dict[str, object], readings: list[DeviceReading], pid: int
) -> Check:
    """An allocation past the cap is refused by the framework's own limit."""
    name = f"{job.label} over cap"
    if said.get("refused"):
        return Check.ok(name, f"{PROBE_CAP_MB} MiB more was refused: {said.get('error')}")
    held = sum(p.memory_mb for r in readings for p in r.processes if p.pid == pid)
    return Check.fail(
        name,
        f"{PROBE_CAP_MB} MiB more was granted (now {held} MiB): the limit did not hold",
        "only the NVML watchdog (GPUQ_OVER_CAP=kill) stops such a job; check gpuq's hook "
        "for this framework",
    )


def judge_released(
    nvml: GpuProbe, job: Probe, pid: int, timeout_s: float = RELEASE_TIMEOUT_S
) -> Check:
    """Free means free: after the probe exits, its GPU is back to what it held before."""
    index, before = job.gpu.index, job.gpu.memory_used_mb
    deadline = time.monotonic() + timeout_s
    while True:
        reading = next(r for r in nvml.read() if r.index == index)
        lingering = any(p.pid == pid for p in reading.processes)
        extra = reading.memory_used_mb - before
        if not lingering and extra <= job.slack_mb:
            return Check.ok(
                f"{job.label} released",
                f"back to {reading.memory_used_mb} MiB used ({before} MiB before the probe)",
            )
        if time.monotonic() > deadline:
            return Check.fail(
                f"{job.label} released",
                f"{timeout_s:g} s after the probe exited, {extra} MiB more is used than "
                "before" + (f" and pid {pid} is still listed" if lingering else ""),
                "the driver does not free a dead process's memory: check `nvidia-smi`",
            )
        time.sleep(0.25)
