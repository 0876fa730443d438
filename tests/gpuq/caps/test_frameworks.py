"""A job's GPU memory cap for PyTorch and JAX: worked out from its device plan, and applied
by the start-up hook in a real child interpreter.

CI has neither PyTorch nor a GPU, so the hook's PyTorch part runs against a stand-in
`torch` package that reports two 8 GiB GPUs; the real one is tried where it is installed.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuq.caps.frameworks import MIB, startup_environment, torch_fraction
from gpuq.contract.device_plan import ENV, DevicePlan
from gpuq.contract.rundir import RunDir
from worker.launch_plan import hook_path

GIB8 = 8192 * MIB
CAPPED = DevicePlan("gpu", (0, 1), memory_limit_mb=2048, memory_total_mb=8192)


def test_a_cap_is_the_same_share_of_each_gpu_for_pytorch_and_jax():
    assert torch_fraction(CAPPED, GIB8) == 0.25
    assert torch_fraction(CAPPED, 2 * GIB8) == 0.125  # a bigger GPU: the same MiB
    assert startup_environment(CAPPED, {}) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2500",
    }


def test_logical_replicas_on_a_gpu_share_the_jobs_whole_cap():
    plan = DevicePlan("gpu", (0,), memory_limit_mb=1000, replicas_per_gpu=3, memory_total_mb=8000)
    assert torch_fraction(plan, 8000 * MIB) == 0.375
    assert startup_environment(plan, {})["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.3750"


def test_jaxs_fraction_is_rounded_down_so_it_never_exceeds_the_cap():
    plan = DevicePlan("gpu", (0,), memory_limit_mb=8191, memory_total_mb=8192)  # 0.99987...
    assert startup_environment(plan, {})["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9998"


def test_memory_growth_only_turns_jaxs_preallocation_off():
    plan = DevicePlan("gpu", (0,), memory_growth=True, memory_total_mb=8192)
    assert torch_fraction(plan, GIB8) is None
    assert startup_environment(plan, {}) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def test_whole_gpus_are_left_alone():
    plan = DevicePlan("gpu", (0,), memory_total_mb=8192)
    env = {
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": ".9",
    }
    assert torch_fraction(plan, GIB8) is None
    assert startup_environment(plan, env) == {}


@pytest.mark.parametrize(
    "plan",
    [DevicePlan.cpu(), DevicePlan("sim", (0, 1), memory_limit_mb=2048, memory_total_mb=8192)],
    ids=["cpu", "sim"],
)
def test_cpu_and_simulated_jobs_hide_real_gpus_from_every_framework(plan):
    assert torch_fraction(plan, GIB8) is None
    assert startup_environment(plan, {"CUDA_VISIBLE_DEVICES": "0,1"}) == {
        "CUDA_VISIBLE_DEVICES": "",
        "JAX_PLATFORMS": "cpu",
    }


def test_a_users_larger_jax_fraction_is_lowered_and_a_smaller_one_kept():
    lowered = startup_environment(CAPPED, {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".9"})
    assert lowered["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.2500"
    kept = startup_environment(CAPPED, {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.1"})
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in kept


def test_a_users_own_preallocation_choice_stays():
    env = startup_environment(CAPPED, {"XLA_PYTHON_CLIENT_PREALLOCATE": "true"})
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"


def test_allocators_that_would_lift_the_cap_are_dropped():
    env = {
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync,expandable_segments:True",
        "PYTORCH_ALLOC_CONF": "backend: cudaMallocAsync",
    }
    changes = startup_environment(CAPPED, env)
    assert changes["XLA_PYTHON_CLIENT_ALLOCATOR"] is None
    assert changes["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert changes["PYTORCH_ALLOC_CONF"] is None


def test_other_allocator_options_are_left_as_they_are():
    env = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "bfc",
    }
    changes = startup_environment(CAPPED, env)
    assert "PYTORCH_CUDA_ALLOC_CONF" not in changes
    assert "XLA_PYTHON_CLIENT_ALLOCATOR" not in changes


def test_a_plan_from_before_gpu_totals_were_recorded_still_loads_and_caps_pytorch():
    old = {"mode": "gpu", "indices": [0], "memory_limit_mb": 2048, "replicas_per_gpu": 1}
    plan = DevicePlan.from_dict(old)
    assert plan.memory_total_mb is None
    assert torch_fraction(plan, GIB8) == 0.25  # PyTorch reads each GPU's total itself
    assert startup_environment(plan, {}) == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


# --- applied by the hook, in a child interpreter -------------------------------------

SHOW_ENV = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in ("
    "'CUDA_VISIBLE_DEVICES', 'JAX_PLATFORMS', 'XLA_PYTHON_CLIENT_PREALLOCATE', "
    "'XLA_PYTHON_CLIENT_MEM_FRACTION', 'XLA_PYTHON_CLIENT_ALLOCATOR', "
    "'PYTORCH_CUDA_ALLOC_CONF')}))"
)


def child(
    tmp_path: Path, code: str, plan: DevicePlan | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -c code` as a `command` job runs it, the hook first on its PYTHONPATH; then
    any `site-*` folder of `tmp_path` (a stand-in torch)."""
    folders = [str(hook_path(RunDir(tmp_path)))] + [str(p) for p in tmp_path.glob("site-*")]
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUQ_", "XLA_", "JAX_", "PYTORCH_"))
    }
    base.update(env or {}, PYTHONPATH=os.pathsep.join(folders))
    if plan is not None:
        base[ENV] = plan.to_json()
    done = subprocess.run(
        [sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_hook_sets_jaxs_and_pytorchs_environment_at_start_up(tmp_path):
    user = {
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95",
        "XLA_PYTHON_CLIENT_ALLOCATOR": "platform",
        "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync,max_split_size_mb:128",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    shown = json.loads(child(tmp_path, SHOW_ENV, CAPPED, user).stdout)
    assert shown == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "JAX_PLATFORMS": None,
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2500",
        "XLA_PYTHON_CLIENT_ALLOCATOR": None,
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
    }


def test_the_hook_hides_real_gpus_from_a_simulated_job(tmp_path):
    plan = DevicePlan("sim", (0, 1), memory_limit_mb=2048, memory_total_mb=8192)
    shown = json.loads(child(tmp_path, SHOW_ENV, plan, {"CUDA_VISIBLE_DEVICES": "0,1"}).stdout)
    assert (shown["CUDA_VISIBLE_DEVICES"], shown["JAX_PLATFORMS"]) == ("", "cpu")
    assert shown["XLA_PYTHON_CLIENT_MEM_FRACTION"] is None


STAND_IN_TORCH = '''
"""A stand-in for PyTorch's CUDA module: two 8 GiB GPUs, CUDA not yet initialised."""
from types import SimpleNamespace

queued, fractions = [], {}
cuda = SimpleNamespace(
    device_count=lambda: 2,
    get_device_properties=lambda d: SimpleNamespace(total_memory=8192 * 2**20),
    set_per_process_memory_fraction=lambda f, d: fractions.__setitem__(d, f),
)
if LAZY:
    cuda._lazy_call = queued.append
'''

# Probes first, as libraries that check for PyTorch do, then imports and initialises CUDA.
USE_TORCH = (
    "import importlib.util, json; importlib.util.find_spec('torch'); import torch; "
    "queued = len(torch.queued); [call() for call in torch.queued]; "
    "print(json.dumps({'queued': queued, 'fractions': torch.fractions}))"
)


def stand_in_torch(tmp_path: Path, *, lazy: bool) -> None:
    package = tmp_path / "site-fake" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"LAZY = {lazy}\n{STAND_IN_TORCH}")


def test_importing_pytorch_queues_the_cap_for_when_cuda_initialises(tmp_path):
    stand_in_torch(tmp_path, lazy=True)
    shown = json.loads(child(tmp_path, USE_TORCH, CAPPED).stdout)
    assert shown == {"queued": 1, "fractions": {"0": 0.25, "1": 0.25}}


def test_pytorch_without_a_cap_is_left_alone(tmp_path):
    stand_in_torch(tmp_path, lazy=True)
    whole = DevicePlan("gpu", (0,), memory_total_mb=8192)
    assert json.loads(child(tmp_path, USE_TORCH, whole).stdout) == {"queued": 0, "fractions": {}}


def test_a_pytorch_without_lazy_calls_gets_a_warning_not_a_crash(tmp_path):
    stand_in_torch(tmp_path, lazy=False)
    done = child(tmp_path, USE_TORCH, CAPPED)
    assert json.loads(done.stdout) == {"queued": 0, "fractions": {}}
    assert "gpuq: this PyTorch has no torch.cuda._lazy_call" in done.stderr


REAL_TORCH = (
    "import json, torch; out = {'queued': len(torch.cuda._queued_calls)}\n"
    "if torch.cuda.is_available():\n"
    "    torch.cuda.init()\n"
    "    out['fraction'] = torch.cuda.get_per_process_memory_fraction(0)\n"
    "    out['total'] = torch.cuda.get_device_properties(0).total_memory\n"
    "print(json.dumps(out))"
)


def test_real_pytorch_gets_the_cap_without_creating_a_cuda_context_on_import(tmp_path):
    pytest.importorskip("torch")
    plain = json.loads(child(tmp_path, REAL_TORCH, None).stdout)
    capped = json.loads(child(tmp_path, REAL_TORCH, CAPPED).stdout)
    if "total" in capped:
        assert capped["fraction"] == pytest.approx(torch_fraction(CAPPED, capped["total"]))
    else:
        assert capped["queued"] == plain["queued"] + 1
