"""`replica_batches`: arrays made into batches for MirroredStrategy's replicas, for
`model.fit`, without the iterator that crashes it.

Builtin jobs train on them; a user's own script can too:

    from gpuq import replica_batches
    batches, validation = replica_batches(strategy, x, y, batch_size=256, validation_split=0.1)
    model.fit(batches, validation_data=validation, shuffle=False, epochs=5)

Keras makes the batches: its own array adapter, so the order, the shuffle and the short last
batch are those a plain `model.fit(x, y, validation_split=...)` makes. They reach the
replicas another way. Left to `model.fit`, they would go through tf.distribute's
MultiDeviceIterator, whose teardown races its own prefetch thread (TensorFlow 2.21, no fix
upstream): Keras makes a spare iterator at the end of every epoch and drops it at the start
of the next, and a drop while that thread was still fetching freed what it was reading. One
job in twenty to sixty, packed three to a GPU, died of SIGSEGV
(docs/reference/how-it-runs.md). Here each replica reads a plain tf.data iterator of its own
(`InputReplicationMode.PER_REPLICA`, no fetch to the device), which starts on its first
batch and stops cleanly wherever it is.

Each replica takes its share of every batch as tf.distribute's own split does: `ceil(b / n)`
rows each in replica order, the last share short or empty. Import it after the devices are
set up: it imports TensorFlow.
"""

from typing import Any

import numpy as np
import tensorflow as tf

# Keras's own batching of arrays, which has no public name: the version is pinned, and
# tests/gpuq/test_batches.py holds it to what `fit(x, y)` does.
from keras.src.trainers.data_adapters import array_slicing
from keras.src.trainers.data_adapters.array_data_adapter import ArrayDataAdapter


def replica_batches(
    strategy: tf.distribute.Strategy,
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int,
    shuffle: bool = True,
    validation_split: float = 0.0,
) -> tuple[Any, Any | None]:
    """The training batches of `x` and `y` (`batch_size` is the global batch) and the
    validation batches (None without `validation_split`), each a dataset over `strategy`'s
    replicas, as `model.fit` takes them: what `model.fit(x, y, batch_size=...,
    shuffle=..., validation_split=...)` would have trained on."""
    train, validation = (x, y), None
    if validation_split:
        # The last part of the data, as `fit(validation_split=...)` takes it.
        train, validation = array_slicing.train_validation_split(
            (x, y), validation_split=validation_split
        )
    return (
        _over_replicas(strategy, train, batch_size, shuffle=shuffle),
        None
        if validation is None
        else _over_replicas(strategy, validation, batch_size, shuffle=False),
    )


def _over_replicas(
    strategy: tf.distribute.Strategy, arrays: tuple[Any, ...], batch_size: int, *, shuffle: bool
) -> Any:
    adapter = ArrayDataAdapter(*arrays, batch_size=batch_size, shuffle=shuffle)
    replicas = strategy.num_replicas_in_sync
    # Every replica gets one share of every batch, so Keras knows an epoch's steps.
    steps = tf.data.experimental.assert_cardinality(adapter.num_batches)

    def of_replica(context: tf.distribute.InputContext) -> tf.data.Dataset:
        batches = adapter.get_tf_dataset()
        if replicas > 1:
            index = context.input_pipeline_id
            batches = batches.map(lambda *batch: _share(batch, index, replicas))
        return batches.apply(steps)

    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False,
    )
    return strategy.distribute_datasets_from_function(of_replica, options)


def _share(batch: tuple[Any, ...], index: int, replicas: int) -> tuple[Any, ...]:
    """Replica `index`'s rows of `batch`: `ceil(rows / replicas)` of them, fewer at the end."""
    rows = tf.shape(tf.nest.flatten(batch)[0], out_type=tf.int64)[0]
    each = (rows + replicas - 1) // replicas
    start = tf.minimum(index * each, rows)
    stop = tf.minimum(start + each, rows)
    return tf.nest.map_structure(lambda part: part[start:stop], batch)
