"""A command job that may be preempted (`"preemptible": true` in its spec): it keeps its
place in `GPUQ_CHECKPOINT_DIR`, saves there when gpuq sends SIGTERM, and resumes from it.

The contract, for any program that says `preemptible: true`:

1. On SIGTERM, save what you need to go on (within the grace period, GPUQ_CANCEL_GRACE_S)
   and exit with a non-zero code (or let the signal end you). Exiting 0 means "finished".
2. At start, resume from what `GPUQ_CHECKPOINT_DIR` holds: gpuq copies the previous
   attempt's checkpoints there for the next attempt.

Here the "training" is a loop of epochs that each take `--epoch-s` seconds; a real script
saves its model and optimizer state the same way (Keras: `model.save_weights`, PyTorch:
`torch.save`). Run it as `gpuq run --preemptible -- python examples/preemptible.py`.
"""

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from gpuq import report

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
parser.add_argument("--epoch-s", type=float, default=1.0)
args = parser.parse_args()

state_file = Path(os.environ.get("GPUQ_CHECKPOINT_DIR", ".")) / "state.json"
state = json.loads(state_file.read_text()) if state_file.exists() else {"epoch": 0}
if state["epoch"]:
    print(f"resumed after epoch {state['epoch']}", flush=True)


def save() -> None:
    partial = state_file.with_suffix(".partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, state_file)  # whole or not at all, whenever a kill comes


def on_sigterm(*_: object) -> None:
    save()
    print(f"SIGTERM: saved after epoch {state['epoch']}; exiting to be resumed", flush=True)
    sys.exit(75)


signal.signal(signal.SIGTERM, on_sigterm)
while state["epoch"] < args.epochs:
    time.sleep(args.epoch_s)  # one epoch of work
    state["epoch"] += 1
    save()
    report(state["epoch"], loss=1.0 / state["epoch"])
print(f"trained {args.epochs} epochs", flush=True)
