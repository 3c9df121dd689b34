"""Benchmark of the JAX game (not a test): ``python -m eval.bench_game``.

Steps per second of the game self-play runs (:mod:`alphagrad.observe`): a move
(:func:`~alphagrad.observe.play`: the engine's elimination and the last move's touch) and
the observation of the state it leaves (:func:`~alphagrad.observe.observe`, every vertex),
jitted and vmapped over a batch of random programs of about ``--sizes`` vertices, each
game moving to a random legal vertex; beside it the observation alone, the move alone,
and a step with the shipped model's decoder on the observation (its logits and value;
zero embeddings, which cost the same). A step of a batch counts ``batch`` steps. Times
are medians of ``--repeats`` calls of ``--steps`` steps each (a ``lax.scan``), after one
call that compiles; the platform is named in the output. ``--out FILE`` also writes the
rows as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import alphagrad as ag
from alphagrad import engine, observe


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """What one run measures."""

    sizes: tuple = (200, 1000)
    batch: int = 64
    steps: int = 2
    repeats: int = 3
    distinct: int = 4  # distinct graphs per batch (rows repeat them: a row's work is its own)
    seed: int = 0


def random_graphs(size: int, count: int, seed: int) -> list:
    """``count`` random programs of ``0.9 * size`` to ``1.1 * size`` vertices, at most the
    engine's limit (the family self-play trains on)."""
    from data_gen.random_programs import ProgramSpec, generate

    graphs, k = [], 0
    ops = max(4, int(size / 1.4))
    while len(graphs) < count:
        spec = ProgramSpec(num_inputs=3, num_outputs=2, num_ops=min(ops, 3000), max_rank=2, max_dim=3, width=5)
        f, args = generate(spec, seed + k)
        g = ag.trace(f, *args)
        k += 1
        if 0.9 * size <= g.num_vertices <= min(1.1 * size, engine.MAX_VERTICES):
            graphs.append(g)
        elif g.num_vertices < 0.9 * size:
            ops = int(ops * 1.1) + 1
        else:
            ops = max(4, int(ops * 0.95))
    return graphs


def batch_of(graphs: list, batch: int) -> observe.Game:
    """The games of ``graphs`` (repeated to ``batch`` rows), padded to one size."""
    V = max(engine.padded_size(g.num_vertices, 64) for g in graphs)
    S = max(engine.padded_size(engine.tables(g).size, 64) for g in graphs)
    games = [observe.start(g, num_vertices=V, num_structures=S) for g in graphs]
    return jax.tree.map(lambda *x: jnp.stack(x), *[games[k % len(games)] for k in range(batch)])


def _random_legal(game: observe.Game, key) -> jax.Array:
    noise = jax.random.uniform(key, game.state.eliminable.shape)
    return jnp.argmax(jnp.where(game.state.eliminable, noise, -1.0))


def _runners(steps: int):
    """Jitted ``(games, key) -> out`` of ``steps`` steps of each kind, vmapped over games."""
    agent = ag.from_pretrained()

    def scan(one):
        def run(games, key):
            def body(games, key):
                keys = jax.random.split(key, games.touched.shape[0])
                return jax.vmap(one)(games, keys)
            return jax.lax.scan(body, games, jax.random.split(key, steps))
        return jax.jit(run)

    def full(game, key):
        game, mults = observe.play(game, _random_legal(game, key))
        return game, (observe.observe(game).sum(), mults)

    def move_only(game, key):
        return observe.play(game, _random_legal(game, key))

    def observe_only(game, key):  # no move: the observation's own time (the touch redrawn, so not hoisted)
        game = game.replace(touched=jax.random.bernoulli(key, 0.01, game.touched.shape))
        return game, observe.observe(game).sum()

    def with_decoder(game, key):
        game, mults = observe.play(game, _random_legal(game, key))
        h = jnp.zeros((game.touched.shape[0], agent.net.config.dim), jnp.float32)
        logits, value = observe.decode(agent.net, agent.params, h, game, observe.observe(game), 1.0)
        return game, (logits.sum() + value, mults)

    return {"play+observe": scan(full), "observe": scan(observe_only), "play": scan(move_only),
            "play+observe+decode": scan(with_decoder)}


def measure(games: observe.Game, settings: BenchSettings) -> dict:
    """Steps per second (batch x steps per call, median call) of each kind of step."""
    out = {}
    key = jax.random.key(settings.seed)
    for name, run in _runners(settings.steps).items():
        t = time.perf_counter()
        jax.block_until_ready(run(games, key))
        compile_s = time.perf_counter() - t
        times = []
        for r in range(settings.repeats):
            t = time.perf_counter()
            jax.block_until_ready(run(games, jax.random.fold_in(key, r + 1)))
            times.append(time.perf_counter() - t)
        out[name] = {"steps_per_s": settings.batch * settings.steps / statistics.median(times),
                     "first_call_s": compile_s}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="200,1000", help="vertices of the graphs, comma-separated")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2, help="steps per timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--distinct", type=int, default=4, help="distinct graphs per batch")
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    settings = BenchSettings(tuple(int(s) for s in args.sizes.split(",")), args.batch, args.steps, args.repeats,
                             args.distinct)
    where = f"{jax.devices()[0].platform} ({platform.processor() or platform.machine()}), jax {jax.__version__}"
    print(f"platform: {where}; batch {settings.batch}, {settings.steps} steps per call, median of "
          f"{settings.repeats}")
    rows = []
    for size in settings.sizes:
        graphs = random_graphs(size, settings.distinct, settings.seed)
        games = batch_of(graphs, settings.batch)
        V, S = games.state.edges.shape[-1], games.state.cost.shape[-1]
        row = {"size": size, "padded_vertices": V, "padded_structures": S,
               "vertices": [g.num_vertices for g in graphs], **measure(games, settings)}
        rows.append(row)
        print(f"\n~{size} vertices (padded {V}, {S} structures):")
        for name in ("play+observe", "observe", "play", "play+observe+decode"):
            r = row[name]
            print(f"  {name:20s} {r['steps_per_s']:10,.1f} steps/s   (first call {r['first_call_s']:.1f} s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"platform": where, "settings": dataclasses.asdict(settings), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
