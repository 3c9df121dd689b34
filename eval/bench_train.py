"""Training throughput (not a test): ``python -m eval.bench_train [--config smoke main]``.

For a 73- and a 148-vertex graph and the batch sizes of each config: self-play
eliminations per second, MCTS simulations per second and update steps per second, and
where the time of one simulation goes (the environment step, the network's features, the
network itself, and the search's own bookkeeping, from the same search run with a
network-free prior). Medians of repeated, jitted, warmed-up calls, measured in one run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import alphagrad as ag
from alphagrad import engine, search
from alphagrad.network import PolicyValueNet, observe
from train import config as C
from train import loop

#: the benchmark graphs, a smaller and a larger one (their vertex counts are printed)
GRAPHS = ("PropaneCombustion", "RoeFlux_3d")


def _median(fn, repeats):
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _graph(name):
    ex = ag.examples.get(name)
    return ag.trace(ex.fn, *ex.args)


def bench(config: C.TrainConfig, graph, repeats: int) -> dict:
    B = config.games
    net = PolicyValueNet(config.network)
    state = search.batch_states([engine.encode(graph, num_structures=config.max_structures)] * B)
    scale = jnp.full((B,), float(ag.cost(graph, "rev")))
    params = loop.init_params(config, jax.random.key(0))
    moves = len(graph.intermediates)
    sims = config.search.simulations

    env = jax.jit(lambda s: jax.vmap(engine.eliminate)(s, jnp.argmax(s.eliminable, -1)))
    feats = jax.jit(lambda s: jax.vmap(observe)(s, scale))
    obs = feats(state)
    apply = jax.jit(lambda p, o: jax.vmap(net.apply, in_axes=(None, 0, 0, 0))(p, *o))
    t_env = _median(lambda: env(state), repeats)
    t_obs = _median(lambda: feats(state), repeats)
    t_net = _median(lambda: apply(params, obs), repeats)

    prior = search.network_prior(net)
    kw = dict(simulations=sims, max_considered=config.search.max_considered)
    t_play = _median(lambda: search.play(params, jax.random.key(0), state, scale, prior=prior, record=True, **kw).mults,
                     max(1, repeats // 10))
    t_free = _median(lambda: search.play(None, jax.random.key(0), state, scale, prior=search.uniform_prior,
                                         **kw).mults, max(1, repeats // 10))

    tx = loop.optimizer(config)
    opt_state = tx.init(params)
    mesh = loop.make_mesh(1)
    update = loop._update_fn(net, config.value_weight, tx, mesh)
    V = state.edges.shape[-1]
    rng = np.random.default_rng(0)
    batch = {"tokens": np.asarray(obs[0])[rng.integers(0, B, config.batch_size)],
             "edges": np.asarray(obs[1])[rng.integers(0, B, config.batch_size)],
             "mask": np.ones((config.batch_size, V), bool),
             "policy": np.full((config.batch_size, V), 1.0 / V, np.float32),
             "value": np.zeros(config.batch_size, np.float32)}
    batch = jax.device_put(batch, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
    params, opt_state = jax.device_put((params, opt_state), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    t_upd = _median(lambda: update(params, opt_state, batch)[2]["loss"], repeats)
    n_sims = B * moves * sims
    per_sim = t_play / (moves * sims)
    return {
        "games x moves": f"{B} x {moves}", "padded V": V,
        "self-play elim/s": B * moves / t_play, "MCTS sims/s": n_sims / t_play,
        "updates/s": 1 / t_upd, "sim ms": 1e3 * per_sim,
        "env %": 100 * t_env / per_sim, "features %": 100 * t_obs / per_sim, "network %": 100 * t_net / per_sim,
        "search %": 100 * max(0.0, t_free / (moves * sims) - t_env) / per_sim,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", default=["smoke", "main"])
    p.add_argument("--repeats", type=int, default=20)
    args = p.parse_args(argv)
    print(f"JAX {jax.__version__}, {jax.devices()[0].platform}, {jax.device_count()} device(s)")
    rows = []
    for name in args.config:
        config = C.load(f"train/configs/{name}.yaml")
        for task in GRAPHS:
            graph = _graph(task)
            r = bench(config, graph, args.repeats)
            rows.append({"config": name, "graph": f"{task} ({graph.num_vertices} vertices)", **r})
            print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in rows[-1].items()),
                  flush=True)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    print("\nsim ms: wall time of one simulation step for the whole batch; the % columns split it into "
          "one environment step, the network's input features, one network call, and the search's "
          "own work (the network-free search's time per simulation minus its environment step).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
