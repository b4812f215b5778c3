"""A small Flax linen model with a ``TrainState`` and optax under ``jax.jit``; the sequence length varies by batch.

Run it under shapewatch, unmodified: ``python -m shapewatch run examples/flax_linen_training.py``.
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

LENGTHS = (8, 12, 8, 16)  # one batch of each length: 3 distinct lengths, 3 compiles of train_step


class Model(nn.Module):
    vocab: int = 32
    width: int = 16

    @nn.compact
    def __call__(self, tokens):
        h = nn.Embed(self.vocab, self.width)(tokens)
        return nn.Dense(self.vocab)(nn.relu(h))


@jax.jit
def train_step(state, tokens, labels):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def batches(key, lengths=LENGTHS, batch=4, vocab=32):
    for length in lengths:
        key, sub = jax.random.split(key)
        tokens = jax.random.randint(sub, (batch, length), 0, vocab)
        yield tokens, jnp.roll(tokens, -1, axis=1)


def main():
    model = Model()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 4), jnp.int32))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(1e-2))
    for tokens, labels in batches(jax.random.PRNGKey(1)):
        state, loss = train_step(state, tokens, labels)
    print(f"flax linen: final loss {float(loss):.3f}")


if __name__ == "__main__":
    main()
