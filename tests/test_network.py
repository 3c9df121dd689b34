"""The policy-value network (alphagrad.network): a per-vertex decoder whose logit reads only
its vertex (what lets the rollout re-score just the neighbours of a move), decoder
weights that reproduce it outside JAX, parameters independent of the graph's size, and
the training loss. Renumbering equivariance and padding of the encoder are checked on
real graphs in tests/test_policy.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alphagrad import features
from alphagrad.hub.format import init_params
from alphagrad.network import NetworkConfig, PolicyNet, decoder_weights, policy_loss

NET = PolicyNet(NetworkConfig(dim=16, heads=2, layers=1))
D = NET.config.dim


@pytest.fixture(scope="module")
def params():
    return init_params(NET, jax.random.key(0))


_encode = jax.jit(lambda p, *a: NET.apply(p, *a, method=PolicyNet.encode))
_decode = jax.jit(lambda p, h, dyn, legal, progress: NET.apply(p, h, dyn, legal, progress, method=PolicyNet.decode))


def _random_state(rng, V):
    h = rng.normal(size=(V, D)).astype(np.float32)
    dyn = rng.normal(size=(V, features.NUM_DYNAMIC)).astype(np.float32)
    legal = rng.random(V) < 0.6
    legal[0] = True
    return h, dyn, legal


def test_a_vertexs_logit_reads_only_that_vertex_and_the_value_only_the_legal_ones(params):
    rng = np.random.default_rng(0)
    V = 24
    h, dyn, legal = _random_state(rng, V)
    logits, value = (np.asarray(x) for x in _decode(params, h, dyn, legal, np.float32(0.3)))
    assert logits.shape == (V,) and value.shape == ()
    assert logits.std() > 1e-3
    u = int(np.flatnonzero(legal)[1])
    for changed in ("dyn", "h"):
        h2, dyn2 = h.copy(), dyn.copy()
        (dyn2 if changed == "dyn" else h2)[u] += 1.0
        logits2, value2 = (np.asarray(x) for x in _decode(params, h2, dyn2, legal, np.float32(0.3)))
        others = np.arange(V) != u
        np.testing.assert_array_equal(logits2[others], logits[others])
        assert abs(logits2[u] - logits[u]) > 1e-4
        assert abs(float(value2) - float(value)) > 1e-6  # u is legal: the value pools it
    # illegal vertices: neither their features nor the mask move the legal logits or the value
    illegal = ~legal
    dyn3 = dyn.copy()
    dyn3[illegal] = rng.normal(size=(illegal.sum(), features.NUM_DYNAMIC))
    logits3, value3 = (np.asarray(x) for x in _decode(params, h, dyn3, legal, np.float32(0.3)))
    np.testing.assert_array_equal(logits3[legal], logits[legal])
    assert float(value3) == pytest.approx(float(value), abs=1e-6)
    fewer = legal.copy()
    fewer[u] = False
    logits4, value4 = (np.asarray(x) for x in _decode(params, h, dyn, fewer, np.float32(0.3)))
    np.testing.assert_array_equal(logits4, logits)  # the mask is applied by the caller
    assert abs(float(value4) - float(value)) > 1e-6
    _, value5 = _decode(params, h, dyn, legal, np.float32(0.9))
    assert abs(float(value5) - float(value)) > 1e-6  # the value reads the game's progress


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def test_decoder_weights_reproduce_the_decoders_logits(params):
    """What the compiled rollout computes from ``decoder_weights`` (float64) is the JAX
    decoder's logit."""
    rng = np.random.default_rng(1)
    h, dyn, legal = _random_state(rng, 40)
    H1, Wd, W2, b2, w3, b3 = decoder_weights(params, h)
    assert H1.shape == (40, D) and Wd.shape == (features.NUM_DYNAMIC, D) and W2.shape == (D, D)
    assert H1.dtype == np.float64 and isinstance(b3, float)
    ours = _gelu(_gelu(H1 + dyn.astype(np.float64) @ Wd) @ W2 + b2) @ w3 + b3
    logits, _ = _decode(params, h, dyn, legal, np.float32(0.5))
    np.testing.assert_allclose(ours, np.asarray(logits), rtol=1e-4, atol=1e-5)


def test_parameters_do_not_depend_on_the_graphs_size(params):
    shapes = jax.tree_util.tree_map(np.shape, params)
    again = init_params(NET, jax.random.key(0))
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(again)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # deterministic per key
    other = init_params(NET, jax.random.key(1))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(params),
                                                         jax.tree_util.tree_leaves(other)))
    assert jax.tree_util.tree_map(np.shape, other) == shapes
    rng = np.random.default_rng(2)
    for V, E in [(7, 9), (300, 700)]:  # smaller and larger than init_params' example
        static = rng.normal(size=(V, features.NUM_STATIC)).astype(np.float32)
        src = rng.integers(0, V, E).astype(np.int32)
        dst = rng.integers(0, V, E).astype(np.int32)
        edge = rng.normal(size=(E, features.NUM_EDGE)).astype(np.float32)
        h = _encode(params, static, src, dst, edge, jnp.int32(E), jnp.ones(V, bool))
        assert h.shape == (V, D) and np.isfinite(np.asarray(h)).all()


def _batch(rng, G=2, K=3, V=16, E=40):
    legal = rng.random((G, K, V)) < 0.5
    legal[..., 0] = True
    target = np.zeros((G, K, V), np.float32)
    for g in range(G):
        for k in range(K):
            good = rng.choice(np.flatnonzero(legal[g, k]), size=min(2, legal[g, k].sum()), replace=False)
            target[g, k, good] = 1.0 / len(good)
    weight = np.ones((G, K), np.float32)
    weight[1, 2] = 0.0  # an empty state slot
    return {
        "static": rng.normal(size=(G, V, features.NUM_STATIC)).astype(np.float32),
        "src": rng.integers(0, V, (G, E)).astype(np.int32), "dst": rng.integers(0, V, (G, E)).astype(np.int32),
        "edge_features": rng.normal(size=(G, E, features.NUM_EDGE)).astype(np.float32),
        "num_edges": np.asarray([E, E // 2], np.int32), "vmask": np.ones((G, V), bool),
        "dynamic": rng.normal(size=(G, K, V, features.NUM_DYNAMIC)).astype(np.float32), "legal": legal,
        "target": target, "regret": np.where(legal, rng.random((G, K, V)), 0.0).astype(np.float32),
        "value": rng.random((G, K)).astype(np.float32),
        "progress": rng.random((G, K)).astype(np.float32), "weight": weight,
    }


def test_policy_loss_is_the_weighted_cross_entropy_regret_and_value_error(params):
    rng = np.random.default_rng(3)
    batch = _batch(rng)
    fn = jax.jit(lambda p, b: policy_loss(NET, p, b, 0.25, 0.5))
    loss, m = fn(params, batch)
    # recomputed in numpy from the network's outputs, graph by graph
    xent, value_err, hits, regret, greedy = [], [], [], [], []
    for g in range(2):
        h = _encode(params, batch["static"][g], batch["src"][g], batch["dst"][g], batch["edge_features"][g],
                    batch["num_edges"][g], batch["vmask"][g])
        logits, value = (np.asarray(x, np.float64) for x in _decode(
            params, h[None], batch["dynamic"][g], batch["legal"][g], batch["progress"][g]))
        for k in range(3):
            legal, t = batch["legal"][g, k], batch["target"][g, k]
            z = np.where(legal, logits[k], -np.inf)
            logp = z - z.max() - np.log(np.exp(z - z.max()).sum())
            xent.append(-(t[legal] * logp[legal]).sum())
            r = batch["regret"][g, k]
            regret.append((np.exp(logp[legal]) * r[legal]).sum())
            greedy.append(r[np.argmax(z)])
            d = abs(value[k] - batch["value"][g, k])
            value_err.append(0.5 * d * d if d <= 1 else d - 0.5)  # Huber, delta 1
            hits.append(t[np.argmax(z)] > 0)
    w = batch["weight"].reshape(-1)
    pw = w * (0.5 + batch["progress"].reshape(-1))
    policy_part = (pw * xent).sum() / pw.sum()
    value_part = (w * value_err).sum() / w.sum()
    entropy = np.log(2.0)  # two equally good moves per state
    assert float(m["policy_loss"]) == pytest.approx(policy_part, rel=1e-4)
    assert float(m["value_loss"]) == pytest.approx(value_part, rel=1e-4)
    regret_part = (pw * regret).sum() / pw.sum()
    assert float(m["regret"]) == pytest.approx(regret_part, rel=1e-4)
    assert float(m["greedy_regret"]) == pytest.approx((pw * greedy).sum() / pw.sum(), rel=1e-5)
    assert float(loss) == pytest.approx(policy_part + 0.5 * regret_part + 0.25 * value_part, rel=1e-4)
    assert float(m["excess"]) == pytest.approx(policy_part - entropy, rel=1e-3, abs=1e-5)
    assert float(m["excess"]) > 0
    assert float(m["accuracy"]) == pytest.approx((pw * hits).sum() / pw.sum(), rel=1e-5)
    # a state of weight 0 counts for nothing
    other = {k: np.array(v) for k, v in batch.items()}
    other["target"][1, 2] = np.roll(other["target"][1, 2], 1)
    other["value"][1, 2] = 100.0
    loss2, _ = fn(params, other)
    assert float(loss2) == pytest.approx(float(loss), rel=1e-6)
    # a far-off cost-to-go (a ruined state: 1000x the best baseline) counts linearly
    other = {k: np.array(v) for k, v in batch.items()}
    other["value"][0, 0] = 1000.0
    _, m3 = fn(params, other)
    assert float(m3["value_loss"]) < 1000.0 * w[0] / w.sum() + float(m["value_loss"]) + 1.0


def test_policy_loss_gradient_lowers_the_loss(params):
    batch = _batch(np.random.default_rng(4))
    fn = jax.jit(jax.value_and_grad(lambda p: policy_loss(NET, p, batch, 0.25, 1.0)[0]))
    p = params
    first, _ = fn(p)
    for _ in range(15):
        loss, g = fn(p)
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(g))
        p = jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, g)
    assert float(fn(p)[0]) < 0.8 * float(first)


def test_reinforce_term_raises_the_moves_of_cheap_samples_and_lowers_those_of_dear_ones(params):
    """States of sampled orders (``sampled``) leave the cross-entropy and take
    ``-advantage * log p_T(move taken)``: its value is that, recomputed by hand, and
    descending it makes the move of a positive advantage likelier, the move of a negative
    one less likely, at the sampling temperature."""
    rng = np.random.default_rng(5)
    batch = _batch(rng)
    plain = jax.jit(lambda p, b: policy_loss(NET, p, b, 0.25, 0.5))(params, batch)[1]
    taken = {(0, 0): 0, (0, 1): int(np.flatnonzero(batch["legal"][0, 1])[-1])}
    sampled = np.zeros((2, 3), bool)
    advantage = np.zeros((2, 3), np.float32)
    target = batch["target"].copy()
    for (g, k), a in taken.items():
        sampled[g, k] = True
        target[g, k] = 0.0
        target[g, k, a] = 1.0
    advantage[0, 0], advantage[0, 1] = 1.5, -0.7
    rl = {**batch, "target": target, "sampled": sampled, "advantage": advantage,
          "temperature": np.full((2, 3), 0.5, np.float32)}
    fn = jax.jit(lambda p, b: policy_loss(NET, p, b, 0.25, 0.5, 2.0))
    loss, m = fn(params, rl)
    # by hand: the mean over the sampled states of -advantage * log softmax(logits / T)[taken],
    # the advantage less its mean over the slot's sampled states (1.5 and -0.7: 1.1 and -1.1)
    h = _encode(params, batch["static"][0], batch["src"][0], batch["dst"][0], batch["edge_features"][0],
                batch["num_edges"][0], batch["vmask"][0])
    logits = np.asarray(_decode(params, h[None], batch["dynamic"][0], batch["legal"][0], batch["progress"][0])[0],
                        np.float64)

    def logp(k, z):
        z = np.where(batch["legal"][0, k], z / 0.5, -np.inf)
        return z - z.max() - np.log(np.exp(z - z.max()).sum())

    centred = {0: 1.1, 1: -1.1}
    by_hand = -np.mean([centred[k] * logp(k, logits[k])[a] for (_, k), a in taken.items()])
    assert float(m["reinforce"]) == pytest.approx(by_hand, rel=1e-4)
    # the sampled states left the cross-entropy: it is that of the other states
    unsampled = {**batch, "weight": np.where(sampled, 0.0, batch["weight"]).astype(np.float32)}
    assert float(m["policy_loss"]) == pytest.approx(float(fn(params, unsampled)[1]["policy_loss"]), rel=1e-5)
    assert float(m["policy_loss"]) != pytest.approx(float(plain["policy_loss"]), rel=1e-3)
    # a few steps on the REINFORCE term alone
    only = jax.jit(jax.grad(lambda p: policy_loss(NET, p, {**rl, "weight": np.where(sampled, 1.0, 0.0)
                                                           .astype(np.float32)}, 0.0, 0.0, 1.0)[0]))
    p = params
    for _ in range(5):
        p = jax.tree_util.tree_map(lambda a, b: a - 0.05 * b, p, only(p))
    h2 = _encode(p, batch["static"][0], batch["src"][0], batch["dst"][0], batch["edge_features"][0],
                 batch["num_edges"][0], batch["vmask"][0])
    after = np.asarray(_decode(p, h2[None], batch["dynamic"][0], batch["legal"][0], batch["progress"][0])[0],
                       np.float64)
    assert logp(0, after[0])[taken[0, 0]] > logp(0, logits[0])[taken[0, 0]]
    assert logp(1, after[1])[taken[0, 1]] < logp(1, logits[1])[taken[0, 1]]
