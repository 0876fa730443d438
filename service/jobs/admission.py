"""Refuses at submit what can never run on this box, naming the field and the problem.

An error about a data file names the problem, never what the file holds: gpuq may be able
to read files its caller cannot.
"""

import csv
import io
import os
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from gpuq.contract import job_files
from gpuq.contract.spec import CnnModel, CommandSpec, CsvData, JobSpec, NpzData
from service.errors import Invalid
from service.gpus.nvml import DeviceReading
from service.host import HostSize
from service.team.data_access import PathRules, PathUse

MIN_CAP_ABOVE_HEADROOM_MB = 256


def check_runnable(
    spec: JobSpec,
    gpus: Sequence[DeviceReading],
    headroom_mb: int,
    *,
    cluster: Sequence[int] | None = None,
    rules: PathRules = PathRules(),
    box: HostSize | None = None,
) -> None:
    """Raises `Invalid` if `spec` could never be placed here or its data cannot be read.

    `cluster`: under a queueing executor, the GPUs of each of its nodes instead of `gpus`.
    `rules`: which paths the job may name, judged with whose rights.
    `box`: the cores and host memory this box gives jobs (None: not judged here).
    """
    if cluster is None:
        _check_resources(spec, gpus, headroom_mb)
        if box is not None:
            _check_host(spec, box)
    else:
        _check_cluster_resources(spec, cluster)
    rules.check(path_uses(spec))
    if spec.keras is not None and isinstance(spec.keras.data, NpzData):
        x_shape = _check_npz(spec.keras.data)
        if isinstance(spec.keras.model, CnnModel) and len(x_shape) not in (3, 4):
            raise Invalid(
                ("body", "keras", "data", "x"),
                f"the cnn model needs images shaped (samples, height, width[, channels]), "
                f"got {x_shape}",
            )
    if spec.keras is not None and isinstance(spec.keras.data, CsvData):
        _check_csv(spec.keras.data)
    if spec.command is not None:
        _check_command(spec.command)


def path_uses(spec: JobSpec) -> list[PathUse]:
    """Every host path `spec` names, and what the job does with it."""
    uses = []
    if spec.keras is not None and isinstance(spec.keras.data, NpzData | CsvData):
        uses.append(PathUse(("body", "keras", "data", "path"), spec.keras.data.path, "read"))
    if spec.command is not None:
        command = spec.command
        program: str | None = command.argv[0]
        if program is not None and "/" not in program:
            program = shutil.which(program, path=command.env.get("PATH", os.environ.get("PATH")))
        if program is not None and os.path.isabs(program):
            uses.append(PathUse(("body", "command", "argv", 0), program, "exec"))
        if command.workdir is not None and os.path.isabs(command.workdir):
            uses.append(PathUse(("body", "command", "workdir"), command.workdir, "enter"))
    return uses


def _check_command(command: CommandSpec) -> None:
    program = command.argv[0]
    loc: tuple[str | int, ...] = ("body", "command", "argv", 0)
    if "/" in program and command.snapshot is not None and not os.path.isabs(program):
        pass  # a program of the snapshot's (`./train.sh`): found in its copy as it starts
    elif "/" in program:
        if not os.path.isabs(program):
            raise Invalid(loc, f"{program!r}: give an absolute path or a bare name on PATH")
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise Invalid(loc, f"{program!r} does not exist or is not executable")
    elif shutil.which(program, path=command.env.get("PATH", os.environ.get("PATH"))) is None:
        raise Invalid(loc, f"{program!r} is not found on PATH of the gpuq service")
    if command.workdir is not None:
        where = ("body", "command", "workdir")
        if not os.path.isabs(command.workdir):
            raise Invalid(where, f"{command.workdir!r} must be an absolute path")
        if not os.path.isdir(command.workdir):
            raise Invalid(where, f"{command.workdir!r} does not exist or is not a directory")


def _check_cluster_resources(spec: JobSpec, nodes: Sequence[int]) -> None:
    res = spec.resources
    if res.gpu_ids is not None:
        raise Invalid(
            ("body", "resources", "gpu_ids"),
            "Slurm chooses the GPUs on a cluster (GPUQ_EXECUTOR=slurm); ask for `gpus` instead",
        )
    if res.nodes > len(nodes):
        raise Invalid(
            ("body", "resources", "nodes"),
            f"{res.nodes} nodes requested but the Slurm partition has {len(nodes)} GPU node(s)",
        )
    # The job's nodes are the partition's largest ones at best.
    smallest = sorted(nodes, reverse=True)[res.nodes - 1] if nodes else 0
    if res.gpu_count > smallest:
        each = "its largest GPU node has" if res.nodes == 1 else f"its {res.nodes} largest have"
        raise Invalid(
            ("body", "resources", "gpus"),
            f"{res.gpu_count} GPUs per node requested but in the Slurm partition {each} "
            f"{smallest} GPU(s)"
            + (
                "; a job runs on one node unless it asks for more (resources.nodes)"
                if res.nodes == 1
                else ""
            ),
        )


def _check_resources(spec: JobSpec, gpus: Sequence[DeviceReading], headroom_mb: int) -> None:
    res = spec.resources
    if res.nodes > 1:
        raise Invalid(
            ("body", "resources", "nodes"),
            f"{res.nodes} nodes requested, but this gpuq runs jobs on this one machine: "
            "a job spans machines only under the Slurm executor (GPUQ_EXECUTOR=slurm)",
        )
    by_index = {g.index: g for g in gpus}
    known = ", ".join(str(i) for i in sorted(by_index)) or "none"
    if res.gpu_ids is not None:
        unknown = [i for i in res.gpu_ids if i not in by_index]
        if unknown:
            raise Invalid(
                ("body", "resources", "gpu_ids"),
                f"no GPU with index {', '.join(map(str, unknown))} on this box (GPUs: {known})",
            )
    elif res.gpu_count > len(gpus):
        raise Invalid(
            ("body", "resources", "gpus"),
            f"{res.gpu_count} GPUs requested but this box has {len(gpus)}",
        )
    if res.memory_mb is None or res.gpu_count == 0:
        return
    loc = ("body", "resources", "memory_mb")
    floor = headroom_mb + MIN_CAP_ABOVE_HEADROOM_MB
    if res.memory_mb < floor:
        raise Invalid(
            loc,
            f"{res.memory_mb} MiB is too small: {headroom_mb} MiB of it is kept for the CUDA "
            f"context and workspaces, so ask for at least {floor} MiB",
        )
    candidates = [by_index[i] for i in res.gpu_ids] if res.gpu_ids else list(by_index.values())
    big_enough = [g for g in candidates if g.memory_total_mb >= res.memory_mb]
    if len(big_enough) < res.gpu_count:
        largest = max((g.memory_total_mb for g in candidates), default=0)
        raise Invalid(
            loc, f"{res.memory_mb} MiB per GPU is more than a GPU here has ({largest} MiB)"
        )


def _check_host(spec: JobSpec, box: HostSize) -> None:
    """A job asking for more cores or host memory than the box gives jobs (its own less
    gpuq's reserve) could never start."""
    res = spec.resources
    if res.cpus is not None and res.cpus > box.cpus:
        raise Invalid(
            ("body", "resources", "cpus"),
            f"{res.cpus:g} cores requested but this box gives jobs {box.cpus:g}"
            + _less_reserve(box.total_cpus - box.cpus, "", "GPUQ_RESERVED_CPUS"),
        )
    if res.host_memory_mb is not None and res.host_memory_mb > box.memory_mb:
        raise Invalid(
            ("body", "resources", "host_memory_mb"),
            f"{res.host_memory_mb} MiB of host memory requested but this box gives jobs "
            f"{box.memory_mb} MiB"
            + _less_reserve(
                box.total_memory_mb - box.memory_mb, " MiB", "GPUQ_RESERVED_HOST_MEMORY_MB"
            ),
        )


def _less_reserve(reserved: float, unit: str, setting: str) -> str:
    """` (GPUQ_RESERVED_CPUS keeps 2 for the OS and gpuq)`, or nothing."""
    if reserved <= 0:
        return ""
    figure = str(int(reserved)) if float(reserved).is_integer() else f"{reserved:g}"
    return f" ({setting} keeps {figure}{unit} for the OS and gpuq)"


def _readable_file(name: str) -> BinaryIO:
    """The data file, opened as gpuq: links are followed to find it, but only a regular
    file is opened (`job_files.open_regular`), never a FIFO or a terminal behind its name."""
    loc = ("body", "keras", "data", "path")
    path = Path(name)
    if not path.is_absolute():
        raise Invalid(loc, f"{name!r} must be an absolute path on the gpuq host")
    try:
        return job_files.open_regular(path)
    except FileNotFoundError:
        raise Invalid(loc, f"{name!r} does not exist or is not a file") from None
    except PermissionError as exc:
        if exc.strerror == "not a regular file":
            raise Invalid(loc, f"{name!r} does not exist or is not a file") from None
        raise Invalid(loc, f"{name!r} is not readable by the gpuq service") from None
    except OSError as exc:
        raise Invalid(loc, f"cannot read {name!r}: {exc.strerror}") from None


def _check_csv(data: CsvData) -> None:
    loc = ("body", "keras", "data", "path")
    try:
        with io.TextIOWrapper(_readable_file(data.path), encoding="utf-8", newline="") as f:
            header = next(csv.reader(f, delimiter=data.delimiter), [])
            first = next(csv.reader(f, delimiter=data.delimiter), None)
    except UnicodeDecodeError:
        raise Invalid(loc, f"{data.path!r} is not UTF-8 text") from None
    except csv.Error:
        raise Invalid(
            loc, f"{data.path!r} is not valid CSV with delimiter {data.delimiter!r}"
        ) from None
    except OSError as exc:
        raise Invalid(loc, f"cannot read {data.path!r}: {exc.strerror}") from None
    if data.label not in header:
        raise Invalid(
            ("body", "keras", "data", "label"),
            f"no column {data.label!r} in the header row of {data.path!r} ({len(header)} columns)",
        )
    if len(header) < 2 or first is None:
        raise Invalid(
            ("body", "keras", "data", "path"),
            f"{data.path!r} needs a header, at least one input column and one data row",
        )


def _check_npz(data: NpzData) -> tuple[int, ...]:
    loc = ("body", "keras", "data", "path")
    try:
        with _readable_file(data.path) as file, zipfile.ZipFile(file) as archive:
            names = set(archive.namelist())
            shapes = {}
            for field, key in (("x", data.x), ("y", data.y)):
                if f"{key}.npy" not in names:
                    raise Invalid(
                        ("body", "keras", "data", field),
                        f"array {key!r} is not in {data.path!r} ({len(names)} arrays)",
                    )
                with archive.open(f"{key}.npy") as member:
                    shapes[field] = _npy_shape(member)
    except zipfile.BadZipFile:
        raise Invalid(loc, f"{data.path!r} is not a readable .npz file (not a zip)") from None
    except ValueError:
        raise Invalid(loc, f"{data.path!r} holds an array with a bad .npy header") from None
    except OSError as exc:
        raise Invalid(loc, f"cannot read {data.path!r}: {exc.strerror}") from None
    x_shape, y_shape = shapes["x"], shapes["y"]
    if len(x_shape) < 2 or x_shape[0] == 0:
        raise Invalid(
            ("body", "keras", "data", "x"), f"x must be (samples, features), got {x_shape}"
        )
    if not y_shape or y_shape[0] != x_shape[0]:
        raise Invalid(
            ("body", "keras", "data", "y"),
            f"y has shape {y_shape} but x has {x_shape[0]} samples",
        )
    return x_shape


def _npy_shape(member: IO[bytes]) -> tuple[int, ...]:
    """The array shape from a .npy header, without reading the data."""
    version = np.lib.format.read_magic(member)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(member)[0]
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(member)[0]
    raise ValueError(f"unsupported .npy format version {version}")
