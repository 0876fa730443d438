"""Where on a Slurm cluster a job goes: the spec's `slurm` section."""

from pydantic import Field

from gpuq.contract.spec_fields import StrictModel

_SLURM_NAME = r"^[\w.\-]+$"


class SlurmOptions(StrictModel):
    """Where on a Slurm cluster the job goes (`GPUQ_EXECUTOR=slurm`); ignored on a box."""

    partition: str | None = Field(
        None, max_length=128, pattern=_SLURM_NAME, description="Instead of GPUQ_SLURM_PARTITION."
    )
    account: str | None = Field(
        None, max_length=128, pattern=_SLURM_NAME, description="Instead of GPUQ_SLURM_ACCOUNT."
    )
    qos: str | None = Field(None, max_length=128, pattern=_SLURM_NAME, description="A QOS.")
    constraint: str | None = Field(
        None,
        max_length=256,
        pattern=r"^[\w.\-&|,:*\[\]()!]+$",
        description="Node features, in Slurm's `--constraint` syntax (e.g. `a100|h100`).",
    )
