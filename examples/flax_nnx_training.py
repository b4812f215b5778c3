"""A small Flax NNX model trained with ``nnx.jit``; the sequence length varies by batch.

Run it under shapewatch, unmodified: ``python -m shapewatch run examples/flax_nnx_training.py``.
"""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

LENGTHS = (8, 12, 8, 16)  # one batch of each length: 3 distinct lengths, 3 compiles of train_step


class Model(nnx.Module):
    def __init__(self, rngs, vocab=32, width=16):
        self.embed = nnx.Embed(vocab, width, rngs=rngs)
        self.out = nnx.Linear(width, vocab, rngs=rngs)

    def __call__(self, tokens):
        return self.out(jax.nn.relu(self.embed(tokens)))


def loss_fn(model, tokens, labels):
    logits = model(tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def make_optimizer(model):
    try:  # flax >= 0.11 asks which variables the optimizer updates
        return nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    except TypeError:
        return nnx.Optimizer(model, optax.adam(1e-2))


@nnx.jit
def train_step(model, optimizer, tokens, labels):
    loss, grads = nnx.value_and_grad(loss_fn)(model, tokens, labels)
    try:
        optimizer.update(model, grads)  # flax >= 0.11
    except TypeError:
        optimizer.update(grads)
    return loss


def batches(key, lengths=LENGTHS, batch=4, vocab=32):
    for length in lengths:
        key, sub = jax.random.split(key)
        tokens = jax.random.randint(sub, (batch, length), 0, vocab)
        yield tokens, jnp.roll(tokens, -1, axis=1)


def main():
    model = Model(nnx.Rngs(0))
    optimizer = make_optimizer(model)
    for tokens, labels in batches(jax.random.PRNGKey(1)):
        loss = train_step(model, optimizer, tokens, labels)
    print(f"flax nnx: final loss {float(loss):.3f}")


if __name__ == "__main__":
    main()
