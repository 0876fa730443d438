"""What users import comes from the one name `gpuq`, without slowing a job's start."""

import subprocess
import sys

import pytest

import gpuq
from gpuq import client, http
from gpuq.contract import spec


def test_users_names_come_from_gpuq():
    assert gpuq.Gpuq is client.Gpuq
    assert gpuq.ApiError is http.ApiError
    assert gpuq.JobSpec is spec.JobSpec
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = gpuq.Nope


def test_importing_gpuq_or_a_runner_loads_no_third_party_library():
    code = (
        "import sys, gpuq, worker.runner, worker.launcher; "
        "print(sorted(m for m in ('pydantic', 'httpx', 'numpy', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
