"""`kind: "command"` jobs: the user's own program with its GPUs, caps and progress."""

import re
import sys
from pathlib import Path

import pytest

from tests.conftest import command_spec, ended, wait_for

pytestmark = pytest.mark.e2e

SHOW_ENV = (
    "import json, os; print('CVD=' + os.environ['CUDA_VISIBLE_DEVICES']); "
    "print('GPUS=' + str(json.loads(os.environ['GPUQ_DEVICES'])['indices'])); "
    "print('ORDER=' + os.environ['CUDA_DEVICE_ORDER']); print('CWD=' + os.getcwd()); "
    "print('GREETING=' + os.environ['GREETING'])"
)


def run(client, spec) -> dict:
    response = client.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return wait_for(client, response.json()["id"], ended)


def test_a_command_runs_with_its_gpus_workdir_and_env(client, tmp_path):
    spec = command_spec(SHOW_ENV, gpu_ids=[1])
    spec["command"].update(workdir=str(tmp_path), env={"GREETING": "hello"})
    job = run(client, spec)
    assert (job["status"], job["exit_code"], job["assigned_gpus"]) == ("succeeded", 0, [1])
    assert job["running_at"] is not None
    log = client.get(f"/v1/jobs/{job['id']}/logs").text.splitlines()
    # A simulated GPU is no CUDA device: the program sees none (a real one on this host
    # stays hidden) and finds the simulated GPUs it was given in its device plan.
    assert log == ["CVD=", "GPUS=[1]", "ORDER=PCI_BUS_ID", f"CWD={tmp_path}", "GREETING=hello"]


def test_a_cpu_command_sees_no_gpu(client):
    job = run(
        client, command_spec("import os; print(repr(os.environ['CUDA_VISIBLE_DEVICES']))", gpus=0)
    )
    assert job["status"] == "succeeded"
    assert client.get(f"/v1/jobs/{job['id']}/logs").text == "''\n"


def test_a_failing_command_is_explained(client):
    job = run(client, command_spec("import sys; print('bad input'); sys.exit(3)"))
    assert (job["status"], job["reason"], job["exit_code"]) == ("failed", "nonzero_exit", 3)
    assert job["message"] == "the program exited with code 3"
    assert job["log_tail"] == ["bad input"]


def test_an_out_of_memory_error_in_the_log_is_recognised(client):
    code = "print('RuntimeError: CUDA out of memory. Tried to allocate 2 GiB'); exit(1)"
    job = run(client, command_spec(code))
    assert job["reason"] == "gpu_oom"
    assert job["message"].endswith("lower batch_size or raise memory_mb")


def test_reserved_environment_and_missing_programs_are_refused(api):
    spec = command_spec("pass")
    spec["command"]["env"] = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    assert "env may not set CUDA_VISIBLE_DEVICES" in response.text
    spec = command_spec("pass")
    spec["command"]["argv"] = ["no-such-program-anywhere"]
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "command", "argv", 0]
    spec = command_spec("pass")
    spec["keras"] = {"model": {"builtin": "mlp"}, "data": {"source": "synthetic"}}
    assert "takes no `keras` section" in api.post("/v1/jobs", json=spec).text


TF_SCRIPT = """
import numpy as np, keras, tensorflow as tf
from gpuq import GpuqProgress
devices = [d.name for d in tf.config.list_logical_devices("CPU")]
print("devices", devices)
strategy = tf.distribute.MirroredStrategy(devices)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
x = np.zeros((64, 4), "float32")
model.fit(x, x[:, :1], epochs=2, batch_size=16, verbose=0, callbacks=[GpuqProgress(batch_size=16)])
print("replicas", strategy.num_replicas_in_sync)
"""


def test_a_tensorflow_script_gets_its_devices_from_the_hook_and_reports_progress(client, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TF_SCRIPT)
    spec = command_spec("", gpus=2)
    spec["command"]["argv"] = [spec["command"]["argv"][0], str(script)]
    job = run(client, spec)
    assert job["status"] == "succeeded", job["log_tail"]
    log = client.get(f"/v1/jobs/{job['id']}/logs").text
    # The hook made one logical device per simulated GPU before the script's first op.
    assert "devices ['/device:CPU:0', '/device:CPU:1']" in log
    assert "replicas 2" in log
    assert job["progress"]["epoch"] == 2 and job["progress"]["fraction"] == 1.0
    epochs = client.get(f"/v1/jobs/{job['id']}/metrics").json()["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2]


def test_a_python_program_that_crashes_says_where_and_leaves_its_stack_in_the_log(client):
    job = run(client, command_spec("import ctypes\nprint('up', flush=True)\nctypes.string_at(0)"))
    assert (job["status"], job["reason"], job["exit_signal"]) == ("failed", "signal", 11)
    assert re.fullmatch(
        r"the program crashed \(SIGSEGV\) in string_at \(\S*ctypes/__init__\.py:\d+\); "
        r"the stack is in the log",
        job["message"],
    ), job["message"]
    log = client.get(f"/v1/jobs/{job['id']}/logs").text
    assert log.startswith("up\nFatal Python error: Segmentation fault")
    assert '  File "<string>", line 3 in <module>' in log


def test_the_own_script_example_trains_on_two_replicas_and_reports_its_epochs(client):
    example = Path(__file__).parents[2] / "examples" / "own_script.py"
    spec = {
        "name": "own-script",
        "kind": "command",
        "command": {"argv": [sys.executable, str(example)]},
        "resources": {"gpus": 2, "memory_mb": 2048},
    }
    job = run(client, spec)
    assert job["status"] == "succeeded", job
    assert (job["progress"]["epoch"], job["progress"]["epochs"]) == (4, 4)
    assert set(job["metrics"]) == {"loss", "mae", "val_loss", "val_mae"}
    log = client.get(f"/v1/jobs/{job['id']}/logs").text
    assert "training on 2 replicas: ['/device:CPU:0', '/device:CPU:1']" in log
