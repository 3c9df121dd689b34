"""A policy-value transformer over the vertices of a partly eliminated graph (flax).

Each vertex is a token. There are no position embeddings: the graph's structure enters
only through per-vertex features (:func:`observe`) and through attention logits biased by
the edges between two vertices (with and without values, in either direction), so the
network is equivariant to renumbering the vertices (a test checks it) and handles any
graph up to the padded size. Outputs: one logit per vertex (illegal actions masked by the
caller) and a value.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp

from alphagrad import engine

NUM_FEATURES = 16
NUM_EDGE_CHANNELS = 4
#: Index of the "eliminable now" flag among a token's features.
LEGAL_FEATURE = 8


def observe(state: engine.GameState, scale) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Features of one state: the network's input.

    Returns:
      ``(tokens [V, NUM_FEATURES], edges [V, V] int8, mask [V])``: per-vertex features
      (log sizes of the leading axes and of the whole value, kind, legality, degrees,
      with/without-value edge counts, the current cost of eliminating the vertex relative
      to ``scale``), the edge codes (0: none, 1: a value-carrying edge i->j, 2: a +-1
      edge; compact, so replay buffers can hold many) and which tokens are real vertices.
    """
    E = state.edges
    present = E != 0
    value = state.has_value[E] & present
    unit = present & ~value
    f32 = lambda x: x.astype(jnp.float32)
    sizes = f32(state.sizes)
    kinds = state.kinds
    cost = f32(engine.vertex_costs(state))
    tokens = jnp.concatenate(
        [
            jnp.log1p(sizes),  # 4
            jnp.log1p(jnp.prod(sizes, axis=-1, keepdims=True)),
            f32(jnp.stack([kinds == 0, kinds == 1, kinds == 2, state.eliminable], -1)),  # 4
            jnp.log1p(f32(jnp.stack([present.sum(0), present.sum(1), value.sum(0), value.sum(1),
                                     unit.sum(0)], -1))),  # 5
            jnp.log1p(cost / scale)[:, None],
            (cost == 0)[:, None].astype(jnp.float32),
        ],
        axis=-1,
    )
    codes = jnp.where(value, 1, jnp.where(unit, 2, 0)).astype(jnp.int8)
    return tokens, codes, kinds >= 0


def edge_channels(codes: jax.Array) -> jax.Array:
    """``[V, V] int8`` edge codes -> ``[V, V, NUM_EDGE_CHANNELS]`` float channels: a
    value-carrying edge i->j, a +-1 edge i->j, and both reversed."""
    value, unit = codes == 1, codes == 2
    return jnp.stack([value, unit, value.T, unit.T], -1).astype(jnp.float32)


class Block(nn.Module):
    """Pre-norm transformer block with edge-biased multi-head attention."""

    dim: int
    heads: int

    @nn.compact
    def __call__(self, x, edges, mask):
        h = nn.LayerNorm()(x)
        q, k, v = (nn.DenseGeneral((self.heads, self.dim // self.heads), name=n)(h) for n in "qkv")
        logits = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(self.dim // self.heads)
        logits = logits + jnp.einsum("qkc,ch->hqk", edges, self.param(
            "edge_bias", nn.initializers.normal(1.0), (NUM_EDGE_CHANNELS, self.heads)))
        logits = jnp.where(mask[None, None, :], logits, -1e9)
        attn = jax.nn.softmax(logits, axis=-1)
        x = x + nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(jnp.einsum("hqk,khd->qhd", attn, v))
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.dim)(nn.gelu(nn.Dense(4 * self.dim)(h)))


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Size of the policy-value network."""

    dim: int = 64
    heads: int = 4
    layers: int = 3


class PolicyValueNet(nn.Module):
    """``(tokens [V, F], edges [V, V] int8, mask [V]) -> (logits [V], value [])``, the
    inputs as :func:`observe` returns them."""

    config: NetworkConfig = NetworkConfig()

    @nn.compact
    def __call__(self, tokens, edges, mask):
        c = self.config
        edges = edge_channels(edges)
        x = nn.Dense(c.dim)(tokens)
        for _ in range(c.layers):
            x = Block(c.dim, c.heads)(x, edges, mask)
        x = nn.LayerNorm()(x)
        logits = nn.Dense(1)(x)[:, 0]
        pooled = (x * mask[:, None]).sum(0) / jnp.maximum(mask.sum(), 1)
        value = nn.Dense(1)(nn.gelu(nn.Dense(c.dim)(pooled)))[0]
        return logits, value


def loss(net: PolicyValueNet, params, batch: dict, value_weight: float = 1.0):
    """Training loss on a batch of samples (see :func:`alphagrad.search.samples`):
    cross-entropy to the policy target over the legal moves plus ``value_weight`` times
    the squared value error. Returns ``(loss, {"policy_loss", "value_loss"})``."""
    logits, value = jax.vmap(net.apply, in_axes=(None, 0, 0, 0))(params, batch["tokens"], batch["edges"],
                                                                  batch["mask"])
    legal = batch["tokens"][..., LEGAL_FEATURE] > 0.5
    logp = jax.nn.log_softmax(jnp.where(legal, logits, -1e9), axis=-1)
    policy = -(batch["policy"] * jnp.where(legal, logp, 0.0)).sum(-1).mean()
    value_loss = jnp.square(value - batch["value"]).mean()
    return policy + value_weight * value_loss, {"policy_loss": policy, "value_loss": value_loss}
