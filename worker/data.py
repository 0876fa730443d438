"""Training data as NumPy arrays: synthetic, or loaded from an .npz or .csv file."""

import csv
import io
import zipfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from gpuq.contract.job_files import open_regular
from gpuq.contract.spec import CsvData, KerasSpec, NpzData


class BadData(ValueError):
    """The data file cannot be used; the message names the problem, never what the file
    holds (it goes to the job's JSON)."""


def load_arrays(
    spec: KerasSpec, outputs: int, roots: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets for `spec`; `outputs` is the model's output width. A data file
    must really lie under one of `roots` (symlinks followed, judged on the opened file)."""
    data = spec.data
    if isinstance(data, NpzData):
        with _open(data.path, roots) as f:
            try:
                with np.load(f, allow_pickle=False) as arrays:
                    return arrays[data.x].astype("float32"), arrays[data.y]
            except (ValueError, KeyError, OSError, zipfile.BadZipFile):
                raise BadData(f"{data.path!r} is not a usable .npz file") from None
    if isinstance(data, CsvData):
        with _open(data.path, roots) as f:
            return load_csv(data, io.TextIOWrapper(f, newline=""))
    rng = np.random.default_rng(data.seed)
    shape = tuple(data.image_shape) if data.image_shape else (data.features,)
    x = rng.standard_normal((data.samples, *shape), dtype=np.float32)
    flat = x.reshape(data.samples, -1)
    if data.task == "regression":
        weights = rng.standard_normal((flat.shape[1], outputs), dtype=np.float32)
        noise = 0.1 * rng.standard_normal((data.samples, outputs), dtype=np.float32)
        return x, (flat @ weights / np.sqrt(flat.shape[1]) + noise).astype("float32")
    centres = rng.standard_normal((flat.shape[1], data.classes), dtype=np.float32)
    labels = np.argmax(flat @ centres, axis=1)
    if spec.loss == "categorical_crossentropy":
        return x, np.eye(data.classes, dtype=np.float32)[labels]
    if spec.loss == "binary_crossentropy":
        return x, (labels % 2).astype("float32").reshape(-1, 1)
    return x, labels.astype("int32")


def _open(path: str, roots: list[str] | None) -> BinaryIO:
    if roots is None:
        return open(path, "rb")
    try:
        return open_regular(Path(path), *(Path(r) for r in roots))
    except PermissionError:
        raise BadData(
            f"{path!r} is not a regular file under GPUQ_DATA_DIRS ({':'.join(roots)}) any more"
        ) from None


def load_csv(data: CsvData, f: io.TextIOWrapper) -> tuple[np.ndarray, np.ndarray]:
    """Every column but `label` as float inputs; `label` as the target."""
    try:
        rows = csv.reader(f, delimiter=data.delimiter)
        header = next(rows)
        table = np.array(
            [[_csv_number(v, line) for v in row] for line, row in enumerate(rows, 2) if row],
            dtype=np.float32,
        )
    except (UnicodeDecodeError, csv.Error, StopIteration):
        raise BadData(f"{data.path!r} is not a CSV file with a header row") from None
    if data.label not in header or table.ndim != 2 or table.shape[1] != len(header):
        raise BadData(f"{data.path!r} does not have {len(header)} numeric columns in every row")
    target = header.index(data.label)
    features = [i for i in range(len(header)) if i != target]
    return table[:, features], table[:, target : target + 1]


def _csv_number(value: str, line: int) -> float:
    try:
        return float(value)
    except ValueError:
        raise BadData(f"line {line} of the CSV file holds a value that is not a number") from None
