"""Exit codes of gpuq's training process, and the reason each one stands for.

The training process reports *how* it ended by its exit code alone; `outcome.classify`
is the one place that turns an exit into a job's reason, through `REASONS`.
"""

from enum import IntEnum

from gpuq.contract.states import Reason


class ExitCode(IntEnum):
    ok = 0  #: trained and saved
    error = 1  #: an unexpected error; the log has the traceback
    invalid_spec = 65  #: the spec did not parse or its data did not fit the model
    device_mismatch = 66  #: TensorFlow saw other devices than the ones assigned
    gpu_oom = 67  #: TensorFlow ran out of GPU memory
    host_oom = 68  #: Python ran out of host memory
    step_timeout = 69  #: a training step hung (an all-reduce that never completes)
    stopped = 75  #: stopped early on SIGTERM (cancel or time limit)
    launch_error = 127  #: the runner's own: it could not start the job's program (`spawn_error`)


#: The reason a failed exit of gpuq's own training process stands for.
REASONS: dict[int, Reason] = {
    ExitCode.error: Reason.nonzero_exit,
    ExitCode.invalid_spec: Reason.invalid_spec,
    ExitCode.device_mismatch: Reason.device_mismatch,
    ExitCode.gpu_oom: Reason.gpu_oom,
    ExitCode.host_oom: Reason.host_oom,
    ExitCode.step_timeout: Reason.idle,
    # SIGTERM that the scheduler did not send (its own stops have a reason of their own).
    ExitCode.stopped: Reason.signal,
}
