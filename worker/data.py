"""Training data as NumPy arrays: synthetic, or loaded from an .npz file."""

import numpy as np

from service.spec import KerasSpec, NpzData


def load(spec: KerasSpec) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets shaped for `spec.model` and `spec.loss`."""
    data = spec.data
    if isinstance(data, NpzData):
        with np.load(data.path, allow_pickle=False) as arrays:
            return arrays[data.x].astype("float32"), arrays[data.y]
    rng = np.random.default_rng(data.seed)
    x = rng.standard_normal((data.samples, data.features), dtype=np.float32)
    if data.task == "regression":
        weights = rng.standard_normal((data.features, spec.model.outputs), dtype=np.float32)
        noise = 0.1 * rng.standard_normal((data.samples, spec.model.outputs), dtype=np.float32)
        return x, (x @ weights / np.sqrt(data.features) + noise).astype("float32")
    centres = rng.standard_normal((data.features, data.classes), dtype=np.float32)
    labels = np.argmax(x @ centres, axis=1)
    if spec.loss == "categorical_crossentropy":
        return x, np.eye(data.classes, dtype=np.float32)[labels]
    if spec.loss == "binary_crossentropy":
        return x, (labels % 2).astype("float32").reshape(-1, 1)
    return x, labels.astype("int32")
