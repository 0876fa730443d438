"""`report`: one epoch's metrics to gpuq from any Python program, no Keras needed.

    from gpuq import report
    report(epoch, val_loss=0.31, accuracy=0.9)

It appends one line to the file in `GPUQ_EVENTS`, the line any program may write itself:

    {"event": "epoch", "epoch": 3, "metrics": {"val_loss": 0.31}}

Outside gpuq (no `GPUQ_EVENTS`) it does nothing.
"""

import os

from gpuq.contract.events import Event, EventWriter, finite


def report(epoch: int, **metrics: float) -> None:
    """Reports that epoch `epoch` (from 1) ended with these metrics; NaN and infinities are
    sent as null."""
    path = os.environ.get("GPUQ_EVENTS")
    if not path:
        return
    writer = EventWriter(path)
    try:
        writer.emit(Event.epoch, epoch=epoch, metrics=finite(metrics))
    finally:
        writer.close()
