"""A recurrent Q-network body written against the current Flax API, in the shape of the
``ScannedRNN`` that JaxMARL's ``iql_rnn.py`` uses (test data for rnnlib.migrate, written for
these tests): an ``nn.scan`` over ``__call__`` that resets the carry where an episode ends, and a
``@staticmethod`` ``initialize_carry`` that builds the carry from a configured cell. It needs
no change, so ``--strict`` must pass on it.
"""

import functools

import jax
import jax.numpy as jnp
import flax.linen as nn

from _report import fill, inputs, save

TIME, BATCH, FEATURES_IN, HIDDEN = 4, 2, 3, 5


class ScannedRNN(nn.Module):
    @functools.partial(
        nn.scan,
        variable_broadcast="params",
        in_axes=0,
        out_axes=0,
        split_rngs={"params": False},
    )
    @nn.compact
    def __call__(self, carry, x):
        ins, resets = x
        hidden_size = ins.shape[-1]
        fresh = ScannedRNN.initialize_carry(hidden_size, *ins.shape[:-1])
        carry = jnp.where(resets[:, None], fresh, carry)
        new_carry, y = nn.GRUCell(features=hidden_size)(carry, ins)
        return new_carry, y

    @staticmethod
    def initialize_carry(hidden_size, *batch_size):
        cell = nn.GRUCell(features=hidden_size, parent=None)
        return cell.initialize_carry(jax.random.PRNGKey(0), (*batch_size, hidden_size))


class QNetwork(nn.Module):
    actions: int = 2

    @nn.compact
    def __call__(self, carry, obs, dones):
        embedding = nn.relu(nn.Dense(HIDDEN)(obs))
        carry, ys = ScannedRNN()(carry, (embedding, dones))
        return carry, nn.Dense(self.actions)(ys)


obs = inputs(TIME, BATCH, FEATURES_IN)
dones = jnp.zeros((TIME, BATCH), bool).at[2, 0].set(True)
carry = ScannedRNN.initialize_carry(HIDDEN, BATCH)
model = QNetwork()
variables = fill(model.init(jax.random.PRNGKey(1), carry, obs, dones))
carry, q = model.apply(variables, carry, obs, dones)
assert q.shape == (TIME, BATCH, 2) and carry.shape == (BATCH, HIDDEN)
save(variables, carry=carry, q=q)
print("q", q.shape)
