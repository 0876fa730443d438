"""Training data as NumPy arrays: synthetic, or loaded from an .npz or .csv file."""

import csv

import numpy as np

from gpuq.contract.spec import CsvData, KerasSpec, NpzData


def load(spec: KerasSpec, outputs: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets for `spec`; `outputs` is the model's output width."""
    data = spec.data
    if isinstance(data, NpzData):
        with np.load(data.path, allow_pickle=False) as arrays:
            return arrays[data.x].astype("float32"), arrays[data.y]
    if isinstance(data, CsvData):
        return load_csv(data)
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


def load_csv(data: CsvData) -> tuple[np.ndarray, np.ndarray]:
    """Every column but `label` as float inputs; `label` as the target."""
    with open(data.path, newline="") as f:
        rows = csv.reader(f, delimiter=data.delimiter)
        header = next(rows)
        table = np.array([[float(v) for v in row] for row in rows if row], dtype=np.float32)
    target = header.index(data.label)
    features = [i for i in range(len(header)) if i != target]
    return table[:, features], table[:, target : target + 1]
