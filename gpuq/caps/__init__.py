"""How a job's process applies its device plan (`gpuq.contract.device_plan`) in each
framework: TensorFlow's devices and caps (`devices`), PyTorch's and JAX's (`frameworks`).

The trainer and a `command` job's start-up hook both use it. It lives in `gpuq`, the one
package a job's PYTHONPATH gets from gpuq, so none of a user's own modules (a `worker.py`
of theirs) can shadow it and leave a job uncapped."""
