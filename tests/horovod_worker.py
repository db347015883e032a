"""Run by tests/test_horovod.py under horovodrun / mpirun: every rank checks
an allreduce and DistributedGradientTape on a tf.Module, then prints OK."""

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2, f"expected 2 ranks, got {size}"

# Allreduce: rank r contributes r+1, so the sum is size*(size+1)/2 everywhere.
summed = hvd.allreduce(tf.fill([3], float(rank + 1)), op=hvd.Sum)
np.testing.assert_allclose(summed.numpy(), np.full([3], size * (size + 1) / 2))
averaged = hvd.allreduce(tf.constant([float(rank)]), op=hvd.Average)
np.testing.assert_allclose(averaged.numpy(), [(size - 1) / 2])


class Linear(tf.Module):
    def __init__(self):
        super().__init__()
        # Different initial values per rank: broadcast must make them equal.
        self.w = tf.Variable(tf.fill([2, 1], float(rank + 10)), name="w")

    def __call__(self, x):
        return tf.matmul(x, self.w)


model = Linear()
hvd.broadcast_variables(model.trainable_variables, root_rank=0)
np.testing.assert_allclose(model.w.numpy(), np.full([2, 1], 10.0))

# loss = sum(x @ w) so d loss / d w = column sums of x; each rank uses its own x.
x = tf.constant([[1.0, 2.0]]) * (rank + 1)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(x))
tape = hvd.DistributedGradientTape(tape)
(grad,) = tape.gradient(loss, model.trainable_variables)
expected = np.mean([[[1.0], [2.0]], [[2.0], [4.0]]], axis=0)
np.testing.assert_allclose(grad.numpy(), expected)
print(f"rank {rank}/{size} OK", flush=True)
