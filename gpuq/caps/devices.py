"""Configures TensorFlow's devices before any op runs: memory caps, or simulated GPUs."""

from typing import Any

from gpuq.contract.device_plan import DevicePlan


class DeviceMismatch(RuntimeError):
    """TensorFlow does not see exactly the devices the job was given."""


def configure(tf: Any, plan: DevicePlan, *, one_worker_of_many: bool = False) -> list[str]:
    """Sets the caps and returns the device names MirroredStrategy must run over.

    `one_worker_of_many` (MultiWorkerMirroredStrategy): only the caps, and no device listed,
    as that would start TensorFlow before the strategy configures its collectives. The
    strategy runs over every GPU, or over the CPU alone (one replica for simulated GPUs)."""
    config = tf.config
    if plan.mode != "gpu":
        # Simulated and CPU jobs never touch a real GPU, even on a host that has some.
        config.set_visible_devices([], "GPU")
    if plan.mode == "cpu" or (plan.mode == "sim" and one_worker_of_many):
        return ["/cpu:0"]
    if plan.mode == "sim":
        cpu = config.list_physical_devices("CPU")[0]
        config.set_logical_device_configuration(
            cpu, [config.LogicalDeviceConfiguration() for _ in range(plan.replicas)]
        )
        names = [d.name for d in config.list_logical_devices("CPU")]
    else:
        gpus = config.list_physical_devices("GPU")
        if len(gpus) != plan.count:
            raise DeviceMismatch(
                f"the job was given {plan.count} GPUs but TensorFlow sees {len(gpus)}"
            )
        for gpu in gpus:
            if plan.memory_growth:
                config.experimental.set_memory_growth(gpu, True)
            elif plan.memory_limit_mb is not None:
                limit = plan.memory_limit_mb
                config.set_logical_device_configuration(
                    gpu,
                    [
                        config.LogicalDeviceConfiguration(memory_limit=limit)
                        for _ in range(plan.replicas_per_gpu)
                    ],
                )
        if one_worker_of_many:
            return []
        names = [d.name for d in config.list_logical_devices("GPU")]
    if len(names) != plan.replicas:
        raise DeviceMismatch(f"expected {plan.replicas} devices, TensorFlow made {names}")
    return names
