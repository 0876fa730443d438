"""Device configuration against a stand-in for TensorFlow's view of GPU hardware.

CI has no GPU, so the calls TensorFlow would make on real GPUs are recorded by a stand-in
of `tf.config` that reports chosen physical GPUs."""

from types import SimpleNamespace

import pytest

from gpuq.caps.devices import DeviceMismatch, configure
from gpuq.contract.device_plan import DevicePlan


class FakeConfig:
    def __init__(self, gpus: int) -> None:
        self.physical = [f"GPU:{i}" for i in range(gpus)]
        self.logical: dict[str, list] = {}
        self.growth: list[str] = []
        self.hidden_gpus = False
        self.experimental = SimpleNamespace(set_memory_growth=lambda g, on: self.growth.append(g))

    LogicalDeviceConfiguration = staticmethod(lambda memory_limit=None: memory_limit)

    def list_physical_devices(self, kind: str) -> list[str]:
        return self.physical if kind == "GPU" else ["CPU:0"]

    def set_visible_devices(self, devices: list, kind: str) -> None:
        self.hidden_gpus = devices == [] and kind == "GPU"

    def set_logical_device_configuration(self, device: str, configs: list) -> None:
        self.logical[device] = configs

    def list_logical_devices(self, kind: str) -> list[SimpleNamespace]:
        if kind == "GPU":
            names = [
                f"/device:GPU:{n}"
                for n in range(sum(len(self.logical.get(g, [None])) for g in self.physical))
            ]
        else:
            names = [f"/device:CPU:{n}" for n in range(len(self.logical.get("CPU:0", [None])))]
        return [SimpleNamespace(name=n) for n in names]


def tf_with(gpus: int) -> SimpleNamespace:
    return SimpleNamespace(config=FakeConfig(gpus))


def test_each_gpu_gets_the_cap():
    tf = tf_with(2)
    names = configure(tf, DevicePlan("gpu", (0, 1), memory_limit_mb=3328))
    assert tf.config.logical == {"GPU:0": [3328], "GPU:1": [3328]}
    assert names == ["/device:GPU:0", "/device:GPU:1"]


def test_virtual_gpus_split_each_gpu():
    tf = tf_with(1)
    names = configure(tf, DevicePlan("gpu", (0,), memory_limit_mb=1000, replicas_per_gpu=3))
    assert tf.config.logical == {"GPU:0": [1000, 1000, 1000]}
    assert len(names) == 3


def test_memory_growth_instead_of_a_cap():
    tf = tf_with(2)
    configure(tf, DevicePlan("gpu", (0, 1), memory_growth=True))
    assert tf.config.growth == ["GPU:0", "GPU:1"] and tf.config.logical == {}


def test_fewer_gpus_than_assigned_is_an_error_not_fewer_replicas():
    with pytest.raises(DeviceMismatch, match="given 2 GPUs but TensorFlow sees 1"):
        configure(tf_with(1), DevicePlan("gpu", (0, 1), memory_limit_mb=1000))


def test_simulated_gpus_are_logical_cpus_and_real_gpus_are_hidden():
    tf = tf_with(4)
    names = configure(tf, DevicePlan("sim", (0, 1), replicas_per_gpu=2))
    assert tf.config.hidden_gpus
    assert names == [f"/device:CPU:{i}" for i in range(4)]


def test_a_cpu_job_hides_every_gpu():
    tf = tf_with(2)
    assert configure(tf, DevicePlan("cpu")) == ["/cpu:0"]
    assert tf.config.hidden_gpus
