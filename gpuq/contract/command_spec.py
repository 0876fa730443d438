"""A command or session job's part of the spec (`kind: "command"` or `"session"`): the
program to run, where, and the environment it gets beside gpuq's own variables."""

from pathlib import PurePosixPath
from typing import Annotated

from pydantic import Field, model_validator

from gpuq.contract.spec_fields import (
    SHA256,
    HostPath,
    StrictModel,
    check_host_path,
    empty_dict,
)

RESERVED_ENV = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "TF_GPU_ALLOCATOR")


class CommandSpec(StrictModel):
    argv: list[Annotated[str, Field(min_length=1, max_length=4096)]] = Field(
        min_length=1,
        max_length=1024,
        description="The program and its arguments, run directly (no shell). A bare name is "
        "looked up on the service's PATH.",
    )
    workdir: HostPath | None = Field(
        None,
        description="Absolute working directory; default the run dir. Not with `snapshot`: "
        "a snapshot's job runs in its own copy of the project (`snapshot_workdir`).",
    )
    snapshot: str | None = Field(
        None,
        pattern=SHA256,
        description="The sha256 of a snapshot of the project (`POST /v1/snapshots`) that its "
        "owner stored: the job runs in its own unpacked copy of it, not in the folder it "
        "came from, so later edits there never reach it.",
    )
    snapshot_workdir: str = Field(
        ".",
        min_length=1,
        max_length=4096,
        description="With `snapshot`: the working directory inside the copy, relative to the "
        "snapshot's root (the folder it was submitted from, as `gpuq run` sets it).",
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
        if self.snapshot is not None and self.workdir is not None:
            raise ValueError(
                "give workdir or snapshot, not both: a snapshot's job runs in its own copy "
                "(snapshot_workdir, relative to the snapshot's root)"
            )
        inside = PurePosixPath(self.snapshot_workdir)
        if inside.is_absolute() or ".." in inside.parts or "\0" in self.snapshot_workdir:
            raise ValueError(
                f"snapshot_workdir {self.snapshot_workdir!r} must be relative to the "
                "snapshot's root, without '..'"
            )
        return self
