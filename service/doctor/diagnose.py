"""`gpuq doctor`: checks this box as gpuq will use it, from `GPUQ_GPUS` to a probe on every
GPU, and reports each check as passed, failed (with a hint) or not applying."""

from collections.abc import Callable

from gpuq.contract.device_plan import ENV, DevicePlan
from service.doctor.child import ProbeChild, ProbeFailed, probe_environment
from service.doctor.fence_check import fence_check
from service.doctor.frameworks import Framework, framework_checks, survey
from service.doctor.gpu_probes import Probe, probe
from service.doctor.host import nvml_checks
from service.doctor.report import Check, Report
from service.executors.fences import open_fences
from service.executors.job_fence import fence_parent
from service.gpus.inventory import Inventory, InventoryError, discover
from service.settings import Settings

SIM_TIMEOUT_S = 180.0


def diagnose(settings: Settings, say: Callable[[str], None] = lambda _: None) -> Report:
    """Runs every check that applies; `say` hears what is being checked, for progress."""
    try:
        inventory = discover(settings.gpus)
    except InventoryError as exc:
        report = Report(simulated=False)
        report.checks.append(
            Check.fail("GPUs", str(exc), "fix GPUQ_GPUS, or the driver if it is `nvml`")
        )
        return report
    report = Report(simulated=inventory.simulated)
    if inventory.probe is None:
        report.checks.append(_simulated(inventory, settings.gpus))
    else:
        say("reading NVML")
        nvml_checks(report, inventory.probe, inventory.probe.read())
    say("asking TensorFlow, PyTorch and JAX what they see")
    indices = tuple(d.index for d in inventory.devices)
    found = survey(DevicePlan.cpu() if inventory.simulated else DevicePlan("gpu", indices))
    report.frameworks = [f.to_json() for f in found]
    report.checks += framework_checks(
        found, gpus=len(inventory.devices), simulated=inventory.simulated
    )
    if settings.executor == "local":
        parent = fence_parent(settings.home)
        fences = open_fences(settings.fences, parent, settings.fence_cgroup)
        report.checks.append(fence_check(fences))
    if inventory.probe is None:
        say("training a step over the simulated GPUs")
        report.checks.append(_simulated_path(inventory, found))
    else:
        report.checks += _probes(inventory, found, settings, say)
    return report


def _simulated(inventory: Inventory, setting: str) -> Check:
    devices = inventory.devices
    what = f"{len(devices)} simulated GPUs of {devices[0].memory_total_mb} MiB"
    if inventory.fallback is not None:
        return Check.skip(
            "NVML",
            f"not usable ({inventory.fallback}); GPUQ_GPUS=auto runs on {what}",
            "on a GPU host, check the NVIDIA driver (nvidia-smi) and set GPUQ_GPUS=nvml",
        )
    return Check.ok("GPUs", f"{what} (GPUQ_GPUS={setting}): jobs train on CPU devices")


def _simulated_path(inventory: Inventory, found: list[Framework]) -> Check:
    """A simulated GPU is a logical CPU device for TensorFlow: MirroredStrategy must make
    one replica of each and all-reduce across them."""
    name = "simulated GPUs"
    if not any(f.name == "tensorflow" and f.installed for f in found):
        return Check.fail(
            name,
            "TensorFlow is not installed: builtin jobs cannot train",
            "pip install 'gpuq[cpu]' (laptops) or 'gpuq[gpu]'",
        )
    count = len(inventory.devices)
    plan = DevicePlan(mode="sim", indices=tuple(range(count)))
    env = probe_environment(plan, {ENV: plan.to_json()})
    try:
        with ProbeChild("sim", env=env) as child:
            said = child.read(SIM_TIMEOUT_S)
    except ProbeFailed as exc:
        return Check.fail(name, f"TensorFlow failed over {count} CPU devices: {exc}", "")
    if said.get("replicas") != count or said.get("all_reduce") != float(count):
        return Check.fail(
            name,
            f"expected {count} replicas, got {said.get('replicas')} over {said.get('devices')}",
            "gpuq's start-up hook did not configure TensorFlow: report this as a bug",
        )
    return Check.ok(name, f"MirroredStrategy ran {count} replicas and an all-reduce on the CPU")


def _probes(
    inventory: Inventory, found: list[Framework], settings: Settings, say: Callable[[str], None]
) -> list[Check]:
    """Every GPU with the quickest framework that sees GPUs; the first GPU with each other
    framework too, since each has its own cap."""
    assert inventory.probe is not None
    usable = [f.name for f in found if f.installed and f.error is None and f.gpus > 0]
    if not usable:
        return [
            Check.fail(
                "probes",
                "no framework here sees the GPUs: index agreement and caps are unchecked",
                "install PyTorch, JAX or gpuq's GPU extra with CUDA",
            )
        ]
    nvml = inventory.probe
    indices = [r.index for r in nvml.read()]
    runs = [(usable[0], i) for i in indices] + [(f, indices[0]) for f in usable[1:]]
    checks: list[Check] = []
    for framework, index in runs:
        before = next(r for r in nvml.read() if r.index == index)
        job = Probe(framework, before, settings.gpu_headroom_mb, settings.drain_slack_mb)
        say(f"probing {job.label}")
        checks += probe(nvml, job)
    return checks
