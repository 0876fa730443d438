"""A command or session job's part of the spec (`kind: "command"` or `"session"`): the
program to run, where, and the environment it gets beside gpuq's own variables."""

from typing import Annotated

from pydantic import Field, model_validator

from gpuq.contract.spec_fields import HostPath, StrictModel, check_host_path, empty_dict

RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR")


class CommandSpec(StrictModel):
    argv: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1,
        max_length=1024,
        description="The program and its arguments, run directly (no shell). A bare name is "
        "looked up on the service's PATH.",
    )
    workdir: HostPath | None = Field(
        None, description="Absolute working directory; default the run dir."
    )
    env: dict[
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)],
        Annotated[str, Field(max_length=32768)],
    ] = Field(
        default_factory=empty_dict,
        max_length=256,
        description="Extra environment variables. The GPU variables are gpuq's to set.",
    )

    @model_validator(mode="after")
    def _check(self) -> "CommandSpec":
        if any("\0" in part for part in self.argv):
            raise ValueError("argv must not contain NUL characters")
        if "/" in self.argv[0]:
            check_host_path(self.argv[0])
        taken = sorted(k for k in self.env if k in RESERVED_ENV or k.startswith("GPUQ_"))
        if taken:
            raise ValueError(f"env may not set {', '.join(taken)}: gpuq sets them for the job")
        if any("\0" in v for v in self.env.values()):
            raise ValueError("env values must not contain NUL characters")
        return self
