"""The policy-value network of the sparse elimination game (flax).

One transformer for all graphs, cheap per move (:mod:`alphagrad.player` plays it):

* an **encoder**, run once per graph (or ``encodings`` times a game, each time on the
  graph left by the moves so far: :class:`NetworkConfig`): each vertex is a token, attention runs along the
  graph's edges (both directions, a self loop, and the edge's features: whether it
  carries values and the multiplications it takes part in), and a global token (the
  graph's mean) joins every block; no position embeddings, so renumbering the vertices
  permutes the outputs (a test checks it);
* a **decoder**, run per state: a vertex's logit is two dense layers over its embedding
  and its dynamic features (elimination cost now, degrees), so after a move only the
  eliminated vertex's neighbours are re-scored; the value (the cost still to come, over
  the graph's best baseline) pools the legal vertices with the game's progress.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Size of the policy-value network, and how often a game encodes its graph:
    ``encodings`` times, at the start and then every ``ceil(n / encodings)`` of its
    ``n`` moves, each time the graph as it is then (what is left after the moves so
    far, :func:`alphagrad.features.graph_inputs`), so that the embeddings the decoder
    reads describe the graph the game is on, not the one it started from."""

    dim: int = 64
    heads: int = 4
    layers: int = 3
    encodings: int = 1


def _segment_softmax(logits, segments, valid, num_segments):
    """Softmax of ``logits [M, H]`` within each segment (masked entries get 0)."""
    logits = jnp.where(valid[:, None], logits, -1e9)
    top = jax.ops.segment_max(logits, segments, num_segments)
    e = jnp.exp(logits - top[segments]) * valid[:, None]
    total = jax.ops.segment_sum(e, segments, num_segments)
    return e / jnp.maximum(total[segments], 1e-9)


class EdgeAttention(nn.Module):
    """Pre-norm transformer block whose attention runs along the graph's edges (both
    directions and a self loop), plus a global token (the mean over the graph)."""

    dim: int
    heads: int

    @nn.compact
    def __call__(self, x, send, recv, messages, valid, vmask):
        V = x.shape[0]
        dh = self.dim // self.heads
        h = nn.LayerNorm()(x)
        q = nn.DenseGeneral((self.heads, dh), name="q")(h)[recv]
        k = nn.DenseGeneral((self.heads, dh), name="k")(h)[send] + nn.DenseGeneral((self.heads, dh), name="ek")(messages)
        v = nn.DenseGeneral((self.heads, dh), name="v")(h)[send] + nn.DenseGeneral((self.heads, dh), name="ev")(messages)
        attn = _segment_softmax((q * k).sum(-1) / jnp.sqrt(dh), recv, valid, V)
        agg = jax.ops.segment_sum(attn[..., None] * v, recv, V)
        x = x + nn.DenseGeneral(self.dim, axis=(-2, -1), name="out")(agg)
        pooled = (x * vmask[:, None]).sum(0) / jnp.maximum(vmask.sum(), 1)
        x = x + nn.Dense(self.dim, name="glob")(pooled)[None, :]
        h = nn.LayerNorm()(x)
        return (x + nn.Dense(self.dim)(nn.gelu(nn.Dense(4 * self.dim)(h)))) * vmask[:, None]


#: Messages carry the edge's first features, then its direction, then its other features
#: (those models saved before them lack: they are widened with zero weights on them).
DIRECTION_AT = 3


def messages(src, dst, edge_features, num_edges, V: int):
    """The encoder's message list for a graph padded to ``V`` vertices: every edge
    forwards and backwards, and a self loop per vertex, with the edge's features and the
    direction as message features (:data:`DIRECTION_AT`). Returns ``(send, recv,
    features, valid)``."""
    E = src.shape[0]
    real = jnp.arange(E) < num_edges
    loops = jnp.arange(V, dtype=src.dtype)
    send = jnp.concatenate([src, dst, loops])
    recv = jnp.concatenate([dst, src, loops])
    zeros = jnp.zeros((V, edge_features.shape[-1]), edge_features.dtype)
    feats = jnp.concatenate([edge_features, edge_features, zeros])
    direction = jnp.concatenate([jnp.zeros(E, jnp.int32), jnp.ones(E, jnp.int32), jnp.full(V, 2, jnp.int32)])
    feats = jnp.concatenate([feats[:, :DIRECTION_AT], jax.nn.one_hot(direction, 3, dtype=feats.dtype),
                             feats[:, DIRECTION_AT:]], -1)
    valid = jnp.concatenate([real, real, jnp.ones(V, bool)])
    return send, recv, feats, valid


class PolicyNet(nn.Module):
    """Policy-value network of the sparse game (:mod:`alphagrad.player`).

    :meth:`encode` (once per graph): ``static [V, NUM_STATIC]``, ``src``/``dst [E]``,
    ``edge_features [E, NUM_EDGE]``, the real edge count and a vertex mask -> one
    embedding per vertex, by ``layers`` blocks of attention along the edges. No position
    embeddings: renumbering the vertices permutes the outputs.

    :meth:`decode` (per state): the embeddings, ``dynamic [V, NUM_DYNAMIC]`` features of
    the state, the legal moves and the game's progress -> ``(logits [V], value [])``.
    A vertex's logit depends only on its embedding and its own dynamic features (two
    dense layers), so after a move only the changed vertices are re-scored; the value
    (the remaining cost relative to the graph's scale) pools the legal vertices.
    """

    config: NetworkConfig = NetworkConfig()

    def setup(self):
        c = self.config
        self.embed = nn.Dense(c.dim)
        self.blocks = [EdgeAttention(c.dim, c.heads) for _ in range(c.layers)]
        self.norm = nn.LayerNorm()
        self.first = nn.Dense(c.dim)
        self.second = nn.Dense(c.dim)
        self.logit = nn.Dense(1)
        self.value_hidden = nn.Dense(c.dim)
        self.value_out = nn.Dense(1)

    def encode(self, static, src, dst, edge_features, num_edges, vmask):
        V = static.shape[0]
        send, recv, feats, valid = messages(src, dst, edge_features, num_edges, V)
        x = self.embed(static) * vmask[:, None]
        for block in self.blocks:
            x = block(x, send, recv, feats, valid, vmask)
        return self.norm(x)

    def decode(self, h, dynamic, legal, progress):
        h = jnp.broadcast_to(h, dynamic.shape[:-1] + h.shape[-1:])
        a1 = nn.gelu(self.first(jnp.concatenate([h, dynamic], -1)))
        a2 = nn.gelu(self.second(a1))
        logits = self.logit(a2)[..., 0]
        pooled = (a2 * legal[..., None]).sum(-2) / jnp.maximum(legal.sum(-1, keepdims=True), 1)
        value = self.value_out(nn.gelu(self.value_hidden(
            jnp.concatenate([pooled, progress[..., None]], -1))))[..., 0]
        return logits, value

    def __call__(self, static, src, dst, edge_features, num_edges, vmask, dynamic, legal, progress):
        return self.decode(self.encode(static, src, dst, edge_features, num_edges, vmask), dynamic, legal, progress)


def decoder_weights(params, h) -> tuple:
    """The decoder as arrays for :func:`alphagrad.player.rollout`: ``(H1, Wd, W2, b2,
    w3, b3)``, ``H1 = h @ W1[:D] + b1`` computed once per graph (float64)."""
    p = params["params"]
    D = h.shape[-1]
    W1 = np.asarray(p["first"]["kernel"], np.float64)
    H1 = np.asarray(h, np.float64) @ W1[:D] + np.asarray(p["first"]["bias"], np.float64)
    f64 = lambda x: np.asarray(x, np.float64)
    return (np.ascontiguousarray(H1), np.ascontiguousarray(W1[D:]), f64(p["second"]["kernel"]),
            f64(p["second"]["bias"]), f64(p["logit"]["kernel"][:, 0]), float(p["logit"]["bias"][0]))


def policy_loss(net: PolicyNet, params, batch: dict, value_weight: float = 0.25, regret_weight: float = 0.0,
                reinforce_weight: float = 1.0):
    """Loss on a batch of ``G`` graphs with ``K`` states each (:mod:`train.data`):
    cross-entropy to the soft policy target over the legal moves, plus ``regret_weight``
    times the policy's expected regret (``batch["regret"]``: ``log1p`` of what each move
    adds to the completed cost over that cost; 0 where unscored), so that a move that
    multiplies the cost weighs more than one that is merely not the best; both weighted
    towards the endgame (weight ``0.5 + progress``); plus ``value_weight`` times the Huber
    error (delta 1: squared below 1, linear above) of the normalised cost-to-go. States of
    the policy's own sampled orders (``batch["sampled"]``, from rollout label sets) take
    the REINFORCE term instead of the cross-entropy: ``-advantage * log p(move taken)``
    under the policy at the order's sampling temperature, the advantage less its mean over
    the graph slot's sampled states, times ``reinforce_weight``, every depth alike (the
    order's cost is their sum). Returns ``(loss, metrics)``;
    ``greedy_regret`` is the regret of the policy's best move."""

    def one(static, src, dst, edge, ne, vmask, dynamic, legal, progress):
        h = net.apply(params, static, src, dst, edge, ne, vmask, method=PolicyNet.encode)
        return net.apply(params, h[None], dynamic, legal, progress, method=PolicyNet.decode)

    logits, value = jax.vmap(one)(batch["static"], batch["src"], batch["dst"], batch["edge_features"],
                                  batch["num_edges"], batch["vmask"], batch["dynamic"], batch["legal"],
                                  batch["progress"])
    legal = batch["legal"]
    logp = jax.nn.log_softmax(jnp.where(legal, logits, -1e9), axis=-1)
    target = batch["target"]
    xent = -(target * jnp.where(legal, logp, 0.0)).sum(-1)
    entropy = -(target * jnp.where(target > 0, jnp.log(jnp.where(target > 0, target, 1.0)), 0.0)).sum(-1)
    sampled = batch.get("sampled", jnp.zeros_like(legal[..., 0]))
    weight = batch["weight"] * (0.5 + batch["progress"]) * ~sampled
    denom = jnp.maximum(weight.sum(), 1e-9)
    policy = (weight * xent).sum() / denom
    excess = (weight * (xent - entropy)).sum() / denom
    top = jnp.argmax(jnp.where(legal, logits, -1e9), -1)[..., None]
    hit = jnp.take_along_axis(target, top, -1)[..., 0] > 0
    accuracy = (weight * hit).sum() / denom
    regret = (weight * (jnp.exp(logp) * batch["regret"]).sum(-1)).sum() / denom
    greedy_regret = (weight * jnp.take_along_axis(batch["regret"], top, -1)[..., 0]).sum() / denom
    # Huber, not squared: a state the policy's own opening ruined can cost 100x the best
    # baseline still to come, and its squared error once outweighed the policy loss 200-fold
    import optax  # training only: loading a model for inference does not need it

    value_err = optax.huber_loss(value, batch["value"], delta=1.0)
    value_loss = (batch["weight"] * value_err).sum() / jnp.maximum(batch["weight"].sum(), 1e-9)
    rl_weight = batch["weight"] * sampled
    reinforce = 0.0
    if "advantage" in batch:
        # less the mean over the slot's sampled states (one graph's samples): the shared
        # baseline of the samples in the batch, whatever subset of them it holds
        adv = batch["advantage"]
        adv = adv - (rl_weight * adv).sum(-1, keepdims=True) / jnp.maximum(rl_weight.sum(-1, keepdims=True), 1e-9)
        logp_t = jax.nn.log_softmax(jnp.where(legal, logits / batch["temperature"][..., None], -1e9), axis=-1)
        taken = jnp.argmax(target, -1)[..., None]
        reinforce = -(rl_weight * adv * jnp.take_along_axis(logp_t, taken, -1)[..., 0]).sum() \
            / jnp.maximum(rl_weight.sum(), 1e-9)
    return policy + regret_weight * regret + value_weight * value_loss + reinforce_weight * reinforce, {
        "policy_loss": policy, "excess": excess, "value_loss": value_loss, "accuracy": accuracy,
        "regret": regret, "greedy_regret": greedy_regret, "reinforce": reinforce}


@functools.lru_cache(maxsize=None)
def update_fn(net: PolicyNet, value_weight: float, regret_weight: float, reinforce_weight: float, tx):
    """The jitted update ``(params, opt_state, batch) -> (params, opt_state, metrics)``:
    one step of the optax transformation ``tx`` on :func:`policy_loss`; the supervised
    trainer, self-play and the per-graph fine-tune (:mod:`alphagrad.selfplay`) all run it."""
    import optax  # training only

    @jax.jit
    def update(params, opt_state, batch):
        (loss, aux), grads = jax.value_and_grad(functools.partial(policy_loss, net), has_aux=True)(
            params, batch, value_weight, regret_weight, reinforce_weight)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {"loss": loss, **aux}

    return update
