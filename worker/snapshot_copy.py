"""A snapshot job's own copy of its project: the runner unpacks the snapshot's tar (which
gpuq copied into the attempt's folder) into `code/`, as the job's owner, before the job's
program starts there.

Unpacked with tarfile's `tar` filter: no member lands outside `code/` (an absolute name,
`..`, or a path through a link the tar made), and no set-id or device file is made. A link
in the project is made as the link it was, pointing wherever it pointed: followed, if ever,
by the job's own program with its owner's rights. Standard library only: every snapshot
job's start waits for it.
"""

import shutil
import tarfile

from gpuq.contract.rundir import RunDir


class BadSnapshot(Exception):
    """The snapshot's tar could not be unpacked; the message says which member and why."""


def unpack(run: RunDir) -> None:
    """Unpacks the attempt's `snapshot.tar` into `code/` and removes the tar; nothing to do
    once done (a job on several nodes unpacks once, on its first)."""
    if not run.snapshot.exists():
        return
    partial = run.path / "code.partial"
    shutil.rmtree(partial, ignore_errors=True)  # a start cut short before; never a link's
    partial.mkdir()
    try:
        with tarfile.open(run.snapshot, "r:") as tar:
            tar.extractall(partial, filter="tar")
    except (tarfile.TarError, OSError, ValueError, UnicodeError, OverflowError) as exc:
        raise BadSnapshot(f"cannot unpack the job's snapshot: {exc}") from exc
    partial.rename(run.code)
    run.snapshot.unlink()
