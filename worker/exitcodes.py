"""Exit codes of the training process, which the scheduler turns into a `reason`."""

from enum import IntEnum


class ExitCode(IntEnum):
    ok = 0  #: trained and saved
    error = 1  #: an unexpected error; the log has the traceback
    invalid_spec = 65  #: the spec did not parse or its data did not fit the model
    device_mismatch = 66  #: TensorFlow saw other devices than the ones assigned
    gpu_oom = 67  #: TensorFlow ran out of GPU memory
    host_oom = 68  #: Python ran out of host memory
    stopped = 75  #: stopped early on SIGTERM (cancel or time limit)
