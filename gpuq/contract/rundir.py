"""The run directory: the only interface between the scheduler and a job's processes."""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuq.contract.job_files import open_file

#: In the runs folder beside the jobs' folders: the start-up hook's folders that the
#: launcher keeps for the runners it forks, one for each version of the hook
#: (`worker.launch_plan.share_hook`).
HOOK_FOLDER = ".pythonpath"
#: the most of a record `read_json` reads: a bigger one is none
MAX_RECORD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class RunDir:
    """`$GPUQ_HOME/runs/<job_id>/<attempt>/` and the files in it."""

    path: Path

    @classmethod
    def of(cls, runs_dir: Path, job_id: int, attempt: int) -> "RunDir":
        return cls(runs_dir / str(job_id) / str(attempt))

    spec = property(lambda self: self.path / "spec.json")
    launch = property(lambda self: self.path / "launch.json")
    events = property(lambda self: self.path / "events.jsonl")
    log = property(lambda self: self.path / "output.log")
    exit = property(lambda self: self.path / "exit.json")
    runner = property(lambda self: self.path / "runner.json")
    heartbeat = property(lambda self: self.path / "heartbeat")
    checkpoints = property(lambda self: self.path / "checkpoints")
    artifacts = property(lambda self: self.path / "artifacts")
    tensorboard = property(lambda self: self.path / "tensorboard")
    #: a snapshot's job: its tar, copied in by gpuq, and the copy of the project it runs in,
    #: unpacked from it by the runner as the job's owner (`worker.snapshot_copy`)
    snapshot = property(lambda self: self.path / "snapshot.tar")
    code = property(lambda self: self.path / "code")
    #: a session's terminal: its runner listens here for gpuq's relay (`terminal`)
    terminal = property(lambda self: self.path / "terminal.sock")

    def create(self) -> None:
        for folder in (self.path, self.checkpoints, self.artifacts, self.tensorboard):
            folder.mkdir(parents=True, exist_ok=True)


def write_json_atomic(path: Path, data: dict[str, Any], *, durable: bool = True) -> None:
    """Writes a whole JSON file or nothing: readers never see half of it. `durable` also
    waits for the disk, for files that must outlive a power cut (how a job ended); what
    only matters while the attempt runs (its spec, its pids) need not."""
    text = json.dumps(data)  # one C call; `json.dump` to a file encodes in Python
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from the run directory; None if it is missing or is none (the job's
    processes can write there: a link, digits past int's limit, nesting past json's depth,
    more than `MAX_RECORD_BYTES`)."""
    try:
        with open_file(path.parent, path.name) as f:
            text = f.read(MAX_RECORD_BYTES + 1)
        if len(text) > MAX_RECORD_BYTES:
            return None  # no record gpuq writes comes near it
        data = json.loads(text)
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
