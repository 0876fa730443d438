"""A job's metric history as the API shows it: per epoch, and sampled steps."""

from pydantic import BaseModel

from service.usage.public import described


class EpochMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int = described("Epoch, from 1; the other keys are the metrics (loss, val_loss, ...).")


class StepMetrics(BaseModel):
    model_config = {"extra": "allow"}
    epoch: int = described("Epoch, from 1.")
    step: int = described("Step within the epoch, from 1; the other keys are the metrics.")


class MetricHistory(BaseModel):
    epochs: list[EpochMetrics] = described("One entry per completed epoch.")
    steps: list[StepMetrics] = described("Sampled steps (about one a second).")
