"""Which of TensorFlow, PyTorch and JAX a job could train with here, their CUDA builds,
and whether each sees the GPUs; each asked in a child of its own, all at once."""

from dataclasses import asdict, dataclass
from typing import Any

from gpuq.contract.device_plan import DevicePlan
from service.doctor.child import ProbeChild, ProbeFailed, probe_environment
from service.doctor.report import Check

#: Probes prefer the quickest to start.
FRAMEWORKS = ("torch", "jax", "tensorflow")
NAMES = {"torch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow"}
#: What to install for a GPU build; TensorFlow's comes with gpuq's `gpu` extra.
GPU_BUILDS = {
    "torch": "install a CUDA build of PyTorch (pip install torch)",
    "jax": "install JAX with its CUDA plugin (pip install 'jax[cuda13]')",
    "tensorflow": "install gpuq's GPU extra (pip install 'gpuq[gpu]'), not tensorflow-cpu",
}
INFO_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class Framework:
    name: str
    installed: bool
    version: str | None = None
    cuda: str | None = None  #: the CUDA it was built for; None: a CPU build
    gpus: int = 0  #: GPUs it sees
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def survey(devices: DevicePlan) -> list[Framework]:
    """Asks each framework in a child with the environment of a job given `devices`."""
    # Asking JAX for its GPUs must not grab three quarters of each one's memory.
    env = probe_environment(devices, {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    children = {name: ProbeChild("info", name, env=env) for name in FRAMEWORKS}
    found = []
    for name, child in children.items():
        with child:
            try:
                said = child.read(INFO_TIMEOUT_S)
            except ProbeFailed as exc:
                found.append(Framework(name, installed=True, error=str(exc)))
                continue
        found.append(
            Framework(
                name,
                installed=bool(said.get("installed")),
                version=said.get("version"),
                cuda=said.get("cuda"),
                gpus=int(said.get("gpus") or 0),
                error=said.get("error") if said.get("installed") else None,
            )
        )
    return found


def framework_checks(found: list[Framework], *, gpus: int, simulated: bool) -> list[Check]:
    """One row per framework. On real GPUs an installed framework that cannot see them
    fails: a job using it would train on the CPU without a word."""
    checks = []
    for f in found:
        name = NAMES[f.name]
        if not f.installed:
            checks.append(Check.skip(name, "not installed"))
        elif f.error is not None:
            checks.append(
                Check.fail(
                    name, f"{f.version or ''} cannot start: {f.error}".strip(), "reinstall it"
                )
            )
        elif simulated:
            checks.append(Check.ok(name, f"{f.version}; simulated GPUs train on the CPU"))
        elif f.cuda is None or f.gpus == 0:
            build = f"CUDA {f.cuda}" if f.cuda else "a CPU build"
            checks.append(
                Check.fail(name, f"{f.version}, {build}, sees no GPU", GPU_BUILDS[f.name])
            )
        elif f.gpus != gpus:
            checks.append(
                Check.fail(
                    name,
                    f"{f.version} (CUDA {f.cuda}) sees {f.gpus} GPUs, NVML {gpus}",
                    "it cannot use every GPU NVML lists: check its CUDA against the driver's",
                )
            )
        else:
            checks.append(Check.ok(name, f"{f.version} (CUDA {f.cuda}), sees {f.gpus} GPUs"))
    if not any(f.installed for f in found):
        checks.append(
            Check.fail(
                "frameworks",
                "none of TensorFlow, PyTorch or JAX is installed",
                "install gpuq's GPU extra (pip install 'gpuq[gpu]') for builtin jobs",
            )
        )
    return checks
