"""gpuq's service: `gpuq serve` (the API, the scheduler, the executors) and the `gpuq`
command. It imports `gpuq`, never `worker` and never TensorFlow: docs/ARCHITECTURE.md."""
