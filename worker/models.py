"""Builtin model architectures. Call inside `strategy.scope()`."""

from typing import Any

from service.spec import KerasSpec

OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}


def build(keras: Any, spec: KerasSpec, input_shape: tuple[int, ...]) -> Any:
    """A compiled model for `spec`, taking inputs of `input_shape` (without the batch axis)."""
    m = spec.model
    layers = [keras.Input(shape=input_shape)]
    if len(input_shape) > 1:
        layers.append(keras.layers.Flatten())
    for units in m.hidden_units:
        layers.append(keras.layers.Dense(units, activation=m.activation))
        if m.dropout:
            layers.append(keras.layers.Dropout(m.dropout))
    layers.append(keras.layers.Dense(m.outputs, activation=m.output_activation))
    model = keras.Sequential(layers, name=m.builtin)
    optimizer = getattr(keras.optimizers, OPTIMIZERS[spec.optimizer])(
        learning_rate=spec.learning_rate
    )
    model.compile(optimizer=optimizer, loss=spec.loss, metrics=list(spec.metrics))
    return model
