"""Builtin model architectures, and allow-listed Keras JSON. Call inside `strategy.scope()`."""

import json
from typing import Any

from gpuq.contract.spec import CnnModel, KerasJsonModel, KerasSpec

OPTIMIZERS = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "rmsprop": "RMSprop"}


def build_model(keras: Any, spec: KerasSpec, input_shape: tuple[int, ...]) -> Any:
    """A compiled model for `spec`, taking inputs of `input_shape` (without the batch axis)."""
    m = spec.model
    if isinstance(m, KerasJsonModel):
        # The service checked the JSON against its allow-list; safe mode refuses anything
        # that would run code on load all the same.
        model = keras.saving.deserialize_keras_object(json.loads(m.keras_json), safe_mode=True)
    else:
        layers: list[Any] = [keras.Input(shape=input_shape)]
        if isinstance(m, CnnModel):
            if len(input_shape) == 2:  # grey images without a channel axis
                layers.append(keras.layers.Reshape((*input_shape, 1)))
            for filters in m.filters:
                layers.append(
                    keras.layers.Conv2D(
                        filters, m.kernel_size, padding="same", activation=m.activation
                    )
                )
                layers.append(keras.layers.MaxPooling2D())
            hidden = m.dense_units
        else:
            hidden = m.hidden_units
        if len(input_shape) > 1:
            layers.append(keras.layers.Flatten())
        for units in hidden:
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
