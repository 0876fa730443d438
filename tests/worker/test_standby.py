"""A standby runner's warm process steps back (nice 10) while it imports TensorFlow only
when it may step forward again on taking a job: root on a host may, root in a container
(no CAP_SYS_NICE) may not, and a job must never run niced."""

import os
import shlex
import shutil
import subprocess
import sys

PROBE = [
    sys.executable,
    "-c",
    "from worker.standby import can_step_forward; print(can_step_forward())",
]


def answer(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


def test_root_may_step_forward_but_not_without_cap_sys_nice():
    assert answer(PROBE) == "True"  # the suite runs as root
    # as Docker starts root in a container: CAP_SYS_NICE is not among its capabilities
    capsh = shutil.which("capsh", path=f"{os.environ['PATH']}:/usr/sbin:/sbin")
    assert capsh, "capsh is missing: apt-get install libcap2-bin"
    assert answer([capsh, "--drop=cap_sys_nice", "--", "-c", shlex.join(PROBE)]) == "False"
