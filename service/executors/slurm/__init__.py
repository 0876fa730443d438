"""Running gpuq's jobs on a Slurm cluster (`GPUQ_EXECUTOR=slurm`).

`SlurmExecutor` (`executors/slurm/`) is a `QueueingExecutor`, which adds `waiting()`,
`started()`, `follow(...)`, `withdraw()` and `nodes()`:

- `commands.py`: Slurm's commands as argument lists in, parsed records out (`sbatch
  --parsable`, `squeue`/`sinfo` with `|`-separated formats, `sacct --parsable2`), each with
  a timeout. The batch script is `exec $GPUQ_SLURM_PYTHON -P -m worker.runner RUN_DIR`: the
  same runner as on a box, so `events.jsonl`, `exit.json` and checkpoints are the same. A
  job on several nodes (`resources.nodes`) adds `--nodes=N --ntasks-per-node=1`; its runner
  starts `srun --kill-on-bad-exit=1 ... -m worker.node` and writes `exit.json` from the
  nodes' own ends (`gpuq.contract.nodes.job_end`: the node that failed first is named).
- `executor.py` hands jobs over and signals them; `queue_view.py` follows them: one `squeue
  --name=gpuq-1,gpuq-2,...` per poll for every job, soon after
  anything happened and then backing off (doubling from `GPUQ_SLURM_POLL_S` to
  `GPUQ_SLURM_POLL_MAX_S`); the runner's files say at once when a job started
  (`runner.json`) or ended (`exit.json`); `sacct` only for jobs the controller forgot, when
  the cluster keeps accounting.
- `nodes.py`: the partition's GPU nodes (`sinfo`), which an API process lists without an
  executor; `environment.py`: whether Slurm's commands answer here.
- `states.py`: Slurm's states (first word only) → waiting, running, ended, and a `Verdict`
  where Slurm knows more than `exit.json` (TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, a
  cancel from outside gpuq, a runner that never started). `scheduler/finishing.judge_exit`
  prefers `exit.json` when it says the job succeeded or gpuq itself stopped the job.

Signals: SIGTERM is `scancel --batch --signal=TERM` (the runner, the batch step, passes it
to training's own process group, as it does Slurm's `--signal=B:TERM@grace` before the time
limit); SIGKILL is `scancel --full --signal=KILL` then `scancel`.
"""

from service.executors.slurm.environment import slurm_environment_ok
from service.executors.slurm.executor import SlurmExecutor
from service.executors.slurm.nodes import SlurmNodes

__all__ = ["SlurmExecutor", "SlurmNodes", "slurm_environment_ok"]
