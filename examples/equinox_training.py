"""A small Equinox model trained with ``eqx.filter_jit``; the sequence length varies by batch.

Run it under shapewatch, unmodified: ``python -m shapewatch run examples/equinox_training.py``.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

LENGTHS = (8, 12, 8, 16)  # one batch of each length: 3 distinct lengths, 3 compiles of train_step


class Model(eqx.Module):
    embed: eqx.nn.Embedding
    out: eqx.nn.Linear
    activation: Callable  # not an array: filter_jit treats it as static

    def __init__(self, key, vocab=32, width=16, activation=jax.nn.relu):
        k1, k2 = jax.random.split(key)
        self.embed = eqx.nn.Embedding(vocab, width, key=k1)
        self.out = eqx.nn.Linear(width, vocab, key=k2)
        self.activation = activation

    def __call__(self, tokens):
        h = self.activation(jax.vmap(jax.vmap(self.embed))(tokens))
        return jax.vmap(jax.vmap(self.out))(h)


def loss_fn(model, tokens, labels):
    logits = model(tokens)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


optimizer = optax.adam(1e-2)


@eqx.filter_jit
def train_step(model, opt_state, tokens, labels):
    loss, grads = eqx.filter_value_and_grad(loss_fn)(model, tokens, labels)
    updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, loss


def batches(key, lengths=LENGTHS, batch=4, vocab=32):
    for length in lengths:
        key, sub = jax.random.split(key)
        tokens = jax.random.randint(sub, (batch, length), 0, vocab)
        yield tokens, jnp.roll(tokens, -1, axis=1)


def main():
    model = Model(jax.random.PRNGKey(0))
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    for tokens, labels in batches(jax.random.PRNGKey(1)):
        model, opt_state, loss = train_step(model, opt_state, tokens, labels)
    print(f"equinox: final loss {float(loss):.3f}")


if __name__ == "__main__":
    main()
