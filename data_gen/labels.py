"""Policy and value targets for the graphs of a dataset, stored beside it.

``python -m data_gen label --data DIR [--num-proc P]`` anneals every graph of the
``train`` and ``validation`` splits of the dataset in DIR (a fixed number of moves,
seeded by the graph's hash: deterministic) and labels states along the annealed order:
at each labelled position ``t``, every later vertex ``u`` (up to ``horizon`` positions
ahead) is moved to ``t`` and the whole order re-scored incrementally
(:func:`alphagrad.evaluator.move_deltas`). The policy target at ``t`` is the set of moves
that keep the completed cost minimal (typically most of them: many eliminations commute),
not the one move the annealed order happens to make; beside it, every candidate's regret
(what the move adds to the completed cost, over that cost, measured up to ``regret_cap``)
tells the trainer how much a wrong move loses; the value target is the cost the order
still spends from ``t``, over the graph's best baseline.

Output: DIR/labels/ is a ``datasets.DatasetDict`` (``train``, ``validation``) with one row
per graph, joined to the graphs by ``graph_hash``. Work is saved in chunks in
DIR/labels/chunks/, so an interrupted run continues where it stopped; ``labels.json``
records the settings. Columns:

``python -m data_gen label --data DIR --policy MODEL --name dagger-1`` labels the
policy's own states instead (DAgger): the model plays each training graph greedily up to
a split drawn from the graph's hash, the rest of the order is annealed with that prefix
kept, and the positions from the split on are labelled the same way, in DIR/dagger-1/
(train split only); ``--splits K`` labels K of the policy's states per graph, at depths
spread over its game, one row each; ``--depth LO HI`` draws them from those fractions of
its game only (e.g. ``0.6 0.95``: the late game). The trainer reads several label sets
(``data.labels``).

``python -m data_gen label --data DIR --policy MODEL --rollouts N --name rollouts-1``
stores the policy's own sampled games instead, for a sequence-level objective
(REINFORCE with the shared baseline of POMO, Kwon et al. 2020): N orders per graph
sampled at ``--temperature`` (one row each), ``positions`` states along each at evenly
spaced depths with the move taken there as the target, and the order's ``advantage``:
how much cheaper it is than the graph's N samples on average, ``-(log c - mean log c)``
over their standard deviation (at least :data:`ADVANTAGE_FLOOR`). What per-move
imitation of annealed completions cannot say, these rows do: which of the policy's own
games ended cheap. A graph whose N samples all cost the same has nothing to teach and
gets no rows.

``python -m data_gen label --data DIR --policy MODEL --candidates K --name improve-1``
labels the policy's greedy states by what its own play makes of each move (rollout
policy improvement, Bertsekas): at ``positions`` states along its greedy order, K first
moves sampled at ``--temperature`` beside the greedy one, each completed by the policy's
greedy play from there; the targets are the candidates whose completed order is
cheapest. Unlike an annealed completion, the policy's own completion credits a move
with what this policy goes on to make of it, and a move it can follow up well is one it
can learn.

``graph_hash``; ``order`` (the annealed order), ``cost`` (its multiplications),
``best_baseline``; ``positions`` (labelled positions, denser towards the endgame);
``moves`` (per position: the vertices whose move to that position keeps the cost
minimal) and ``deltas`` (their cost change, <= 0; equal to the minimum); ``regrets`` (per
position: for the candidates ``order[t:t + horizon]`` in that order, what moving each to
``t`` adds to the cheapest move's cost, over the order's cost, float32, at most
``regret_cap``); ``to_go`` (per
position: what the order spends from there); ``anneal_moves``; ``seconds``; in rollout
sets also ``advantage`` and ``temperature`` (of the sampled order; ``deltas`` and
``regrets`` are empty there: nothing was scored but the move taken); in candidates sets
``order`` is the policy's greedy order, ``deltas`` the cheapest completion's cost less
its cost, and ``regrets`` are empty.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import sys
import time

import numpy as np

#: Version of the label columns; the trainer refuses labels of another version.
LABEL_SCHEMA_VERSION = 2
#: The least standard deviation of log cost an advantage is divided by: samples that
#: differ by well under 2% teach little, and dividing by their spread alone would make
#: them teach as much as samples that differ 2-fold.
ADVANTAGE_FLOOR = 0.02
LABEL_SPLITS = ("train", "validation")
#: ``LabelConfig.depth`` of the whole game: DAgger states drawn from every depth.
WHOLE_GAME = (0.0, 1.0)
_META_KEY = b"alphagrad.labels"


@dataclasses.dataclass(frozen=True)
class LabelConfig:
    """How labels are made.

    Attributes:
      moves_per_vertex, min_moves, max_moves: annealing moves per graph
        (``moves_per_vertex * n`` clipped to ``[min_moves, max_moves]``).
      positions: labelled positions per graph (all of them for shorter orders).
      horizon: candidate moves per position (the next ``horizon`` vertices of the order).
      regret_cap: a move's regret is measured up to this multiple of the order's cost
        (scoring a worse move stops there; it is recorded as the cap).
      screen: labels of a policy's states (DAgger) also anneal the rest of the order from
        forward and from reverse for ``1 / screen`` of the moves each, and go on from the
        cheaper if it beats the policy's own rest (:func:`complete`); 0: the policy's rest
        alone.
      splits: labels of a policy's states: this many of its states per graph (one row
        each), at depths spread over the game (:func:`split_position`), each completed
        and labelled at ``positions // splits`` positions from it. One state per graph
        leaves the policy's mistakes at other depths unlabelled round after round (its
        depth is drawn from the graph's hash), and a free move that makes the rest cost
        hundreds of times more can lie at any depth.
      depth: labels of a policy's states: the fractions ``(lo, hi)`` of its game the
        splits are drawn from (:func:`split_position`); ``(0.6, 0.95)`` aims the labels at
        the late game, where a greedy order's excess over annealing is made
        (``python -m eval.loss_profile``).
      rollouts: labels of a policy: 0 (its states completed by annealing, above), or this
        many orders sampled from it per graph, stored with their advantage (the module
        docstring; ``positions`` states along each).
      candidates: labels of a policy: 0, or this many first moves sampled beside the greedy
        one at each labelled greedy state, each completed by the policy (the module
        docstring); not with ``rollouts``.
      temperature: the sampling temperature of ``rollouts`` or ``candidates``.
      chunk_size: graphs per saved chunk.
    """

    moves_per_vertex: int = 300
    min_moves: int = 5000
    max_moves: int = 100_000
    positions: int = 64
    horizon: int = 256
    regret_cap: float = 3.0
    screen: int = 8
    splits: int = 1
    depth: tuple[float, float] = WHOLE_GAME
    rollouts: int = 0
    candidates: int = 0
    temperature: float = 0.25
    chunk_size: int = 64

    def __post_init__(self):
        for name, lowest in (("screen", 0), ("splits", 1), ("positions", 1), ("rollouts", 0), ("candidates", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ValueError(f"{name} = {value!r} must be >= {lowest} (an integer)")
        depth = tuple(self.depth) if isinstance(self.depth, (tuple, list)) else ()
        if not (len(depth) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in depth)
                and 0 <= depth[0] < depth[1] <= 1):
            raise ValueError(f"depth = {self.depth!r} must be two fractions of the game, 0 <= lo < hi <= 1, "
                             f"like (0.6, 0.95)")
        object.__setattr__(self, "depth", (float(depth[0]), float(depth[1])))
        if self.rollouts == 1:
            raise ValueError("rollouts = 1: an advantage needs at least 2 samples of a graph to compare")
        if (self.rollouts or self.candidates) and self.depth != WHOLE_GAME:
            raise ValueError("depth sets where annealed completions of a policy's states start; rollouts and "
                             "candidates play whole games: give depth with neither")
        if self.rollouts and self.candidates:
            raise ValueError("rollouts and candidates are two kinds of label set; give one")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and self.temperature > 0):
            raise ValueError(f"temperature = {self.temperature!r} must be a finite number > 0")

    def moves(self, count: int) -> int:
        """Annealing moves for ``count`` vertices to order: ``moves_per_vertex * count``
        clipped to ``[min_moves, max_moves]``."""
        return int(np.clip(self.moves_per_vertex * count, self.min_moves, self.max_moves))

    def identity(self, policy: bool = False) -> dict:
        """What the labels depend on (``policy``: of a policy's states, which screen and
        how many splits; one split, as before there was a choice, is left out)."""
        d = dataclasses.asdict(self)
        d.pop("chunk_size")
        played = self.rollouts or self.candidates  # nothing annealed: the policy's own play
        if not policy or played:
            d.pop("screen")
        if not policy or self.splits == 1 or played:
            d.pop("splits")
        if not policy or self.depth == WHOLE_GAME or played:
            d.pop("depth")  # the whole game, as before there was a choice
        else:
            d["depth"] = list(self.depth)
        for name in ("rollouts", "candidates"):
            if not getattr(self, name):
                d.pop(name)
        if not played:
            d.pop("temperature")
        else:
            for name in ("moves_per_vertex", "min_moves", "max_moves", "horizon", "regret_cap"):
                d.pop(name)  # nothing is annealed or scored
        return {"label_schema_version": LABEL_SCHEMA_VERSION, **d}


def features(rollouts: bool = False):
    """The label columns (``rollouts``: of a rollout set, with ``advantage`` and
    ``temperature``)."""
    import datasets as hf

    i32, i64, f32 = hf.Value("int32"), hf.Value("int64"), hf.Value("float32")
    cols = {
        "graph_hash": hf.Value("string"), "order": hf.List(i32), "cost": i64, "best_baseline": i64,
        "positions": hf.List(i32), "moves": hf.List(hf.List(i32)), "deltas": hf.List(hf.List(i64)),
        "regrets": hf.List(hf.List(f32)),
        "to_go": hf.List(i64), "anneal_moves": i64, "seconds": f32,
    }
    if rollouts:
        cols.update(advantage=f32, temperature=f32)
    return hf.Features(cols)


def positions(n: int, count: int) -> np.ndarray:
    """``count`` positions of an order of ``n`` (all if ``n <= count``), denser towards the
    end: ``floor(n * (1 - (1 - u)^2))`` at evenly spaced ``u``, deduplicated."""
    if n <= count:
        return np.arange(n, dtype=np.int64)
    u = (np.arange(count) + 0.5) / count
    return np.unique(np.floor(n * (1 - (1 - u) ** 2)).astype(np.int64).clip(0, n - 1))


def _seed(graph_hash: str) -> int:
    return int(hashlib.sha256(graph_hash.encode()).hexdigest()[:8], 16)


def split_position(n: int, seed: int, part: int = 0, parts: int = 1, depth: tuple = WHOLE_GAME) -> int:
    """Where a policy's game of ``n`` moves is split for the DAgger row ``part`` of
    ``parts``: quantile ``(part + u) / parts`` of a distribution over the fractions
    ``depth`` of the game denser towards their end, ``u`` drawn from ``seed`` (the
    graph's hash), so the parts cover those depths in strata; at most ``n - 2``
    (something is left to complete)."""
    u = (part + np.random.default_rng(seed).random()) / parts
    lo, hi = depth
    return min(int(n * (lo + (hi - lo) * (1 - (1 - u) ** 2))), max(n - 2, 0))


def label_graph(graph, config: LabelConfig, best_baseline: int | None = None, player=None, part: int = 0,
                played=None) -> dict:
    """The label row of one graph (see the module docstring). With ``player`` (a
    :class:`alphagrad.player.Player` of ``graph``), the row labels the policy's own states
    (DAgger): the policy plays greedily up to a split position drawn from the graph's hash
    (denser towards the endgame; :func:`split_position` of ``part`` of
    ``config.splits``), the rest of its order is annealed with the policy's prefix kept,
    and positions from the split on are labelled on that completed order. ``played``:
    the policy's greedy order if already played (the parts of a graph share it)."""
    from alphagrad.anneal import anneal
    from alphagrad.evaluator import Evaluator
    from alphagrad.scoring import best_baseline as baseline_cost

    t0 = time.perf_counter()
    ev = player.ev if player is not None else Evaluator(graph, "exact")
    inter = list(graph.intermediates)
    n = len(inter)
    if best_baseline is None:
        best_baseline = baseline_cost(graph, evaluator=ev)
    seed = _seed(graph.fingerprint)
    split = 0
    if player is None:
        moves = config.moves(n)
        order = np.asarray(anneal(graph, iterations=moves, seed=seed, threads=1), np.int64)
    else:
        played = np.asarray(player.play(0.0) if played is None else played, np.int64)
        split = split_position(n, seed, part, config.splits, config.depth)
        rest = n - split
        moves = config.moves(rest)
        order = complete(ev, played, split, moves, (seed + 7919 * part) % 2**32, config.screen)
    count = config.positions if player is None else max(1, config.positions // config.splits)
    pos = split + positions(n - split, count)
    if player is not None:  # the state the policy reached is labelled first
        pos = np.unique(np.concatenate([[split], pos[:count - 1]]))
    cost = int(ev.cost(order))
    slack = int(config.regret_cap * cost)
    to_go = _to_go(ev, order, pos)
    good, gains, regrets = [], [], []
    for d, targets in candidates(ev, order, pos, config.horizon, slack):
        best = d.min()
        good.append(targets.tolist())
        gains.append([int(best)] * len(targets))
        regrets.append(np.minimum((d - best) / max(cost, 1), config.regret_cap).astype(np.float32).tolist())
    return {"graph_hash": graph.fingerprint, "order": order.tolist(), "cost": cost,
            "best_baseline": int(best_baseline), "positions": pos.tolist(), "moves": good, "deltas": gains,
            "regrets": regrets, "to_go": to_go.tolist(), "anneal_moves": moves, "seconds": round(time.perf_counter() - t0, 3)}


def candidates(ev, order, pos, horizon: int, slack: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """At each position ``t`` of ``pos``: what moving each of the next ``horizon`` vertices
    of ``order`` to ``t`` adds to its cost (:func:`alphagrad.evaluator.move_deltas`, scored
    up to ``slack`` more), and the targets, the vertices whose move adds least."""
    from alphagrad.evaluator import move_deltas

    deltas, _ = ev.run(move_deltas, order, np.asarray(pos, np.int64), horizon, ev.compose, ev.join, ev.cost_table,
                       slack)
    out = []
    for r, t in enumerate(pos):
        d = deltas[r, :max(0, min(horizon, len(order) - t))]
        out.append((d, order[t + np.flatnonzero(d == d.min())]))
    return out


def _to_go(ev, order, pos) -> np.ndarray:
    """What ``order`` still spends from each of positions ``pos``."""
    from alphagrad.evaluator import step_costs

    steps, _ = ev.run(step_costs, np.asarray(order, np.int64), ev.compose, ev.join, ev.cost_table)
    return np.append(np.cumsum(steps[::-1])[::-1], 0)[pos]


def rollout_rows(graph, config: LabelConfig, best_baseline: int, player) -> list[dict]:
    """The rows of one graph in a rollout set (the module docstring): ``config.rollouts``
    orders sampled from ``player`` at ``config.temperature`` (seeds from the graph's
    hash), each with ``config.positions`` states at evenly spaced depths (a random offset
    per order) and its advantage over the graph's samples; no rows where they all cost
    the same."""
    t0 = time.perf_counter()
    ev, n = player.ev, len(graph.intermediates)
    if n < 2:
        return []
    seed = _seed(graph.fingerprint)
    orders = [np.asarray(player.play(config.temperature, seed + k), np.int64) for k in range(config.rollouts)]
    costs = np.asarray([ev.cost(o) for o in orders], np.float64)
    logs = np.log(np.maximum(costs, 1.0))
    if np.ptp(logs) == 0:
        return []
    advantage = -(logs - logs.mean()) / max(float(logs.std()), ADVANTAGE_FLOOR)
    rng = np.random.default_rng(seed)
    count = min(config.positions, n)
    seconds = round((time.perf_counter() - t0) / config.rollouts, 3)
    rows = []
    for order, cost, a in zip(orders, costs, advantage):
        pos = np.unique(np.floor((np.arange(count) + rng.random()) * n / count).astype(np.int64))
        to_go = _to_go(ev, order, pos)
        rows.append({"graph_hash": graph.fingerprint, "order": order.tolist(), "cost": int(cost),
                     "best_baseline": int(best_baseline), "positions": pos.tolist(),
                     "moves": [[int(order[t])] for t in pos], "deltas": [[] for _ in pos],
                     "regrets": [[] for _ in pos], "to_go": to_go.tolist(), "anneal_moves": 0,
                     "seconds": seconds, "advantage": float(a), "temperature": float(config.temperature)})
    return rows


def improvement_row(graph, config: LabelConfig, best_baseline: int, player) -> dict:
    """The row of one graph in a candidates set (the module docstring): the policy's greedy
    order, and at each labelled state of it the candidate moves (the greedy one and
    ``config.candidates`` sampled at ``config.temperature``, seeded by the graph's hash)
    whose completion by the policy's greedy play is cheapest; ``deltas`` is that cost
    less the greedy order's (<= 0)."""
    t0 = time.perf_counter()
    ev, n = player.ev, len(graph.intermediates)
    played = np.asarray(player.play(0.0), np.int64)
    cost = int(ev.cost(played))
    seed = _seed(graph.fingerprint)
    pos = positions(n, config.positions)
    pos = pos[pos < n - 1]  # the last move has no alternative
    good, gains = [], []
    for r, t in enumerate(pos):
        prefix = played[:t]
        firsts = {int(played[t])} | {player.play_from(prefix, config.temperature, seed + 7919 * r + k, 1)[0]
                                     for k in range(config.candidates)}
        costs = {m: cost if m == played[t] else int(ev.cost(np.concatenate([prefix, [m], player.play_from(
            np.append(prefix, m))]))) for m in sorted(firsts)}
        best = min(costs.values())
        good.append([m for m in sorted(costs) if costs[m] == best])
        gains.append([best - cost] * len(good[-1]))
    to_go = _to_go(ev, played, pos)
    return {"graph_hash": graph.fingerprint, "order": played.tolist(), "cost": cost,
            "best_baseline": int(best_baseline), "positions": pos.tolist(), "moves": good, "deltas": gains,
            "regrets": [[] for _ in pos], "to_go": to_go.tolist(), "anneal_moves": 0,
            "seconds": round(time.perf_counter() - t0, 3)}


def complete(ev, played: np.ndarray, split: int, moves: int, seed: int, screen: int = 8) -> np.ndarray:
    """``played`` with its first ``split`` vertices kept and the rest re-ordered by
    ``moves`` annealing moves from the policy's own rest. With ``screen`` > 0, the rest in
    forward and in reverse order are also annealed, ``moves // screen`` moves each, and
    if one ends cheaper than the policy's, ``moves`` more go on from it: from the
    policy's rest alone, annealing stays in the basin the policy chose (on a graph a
    sweep wins, the policy's cheap-now interior moves), and the labels would then teach
    the policy its own mistakes. Never dearer than with ``screen`` 0."""
    from alphagrad.anneal import temperatures

    n = len(played)
    prefix, rest = played[:split], played[split:]
    if n - split < 2:
        return played.copy()

    def run(order, count, k):
        kept = order.copy()
        temps = temperatures(ev.cost(np.concatenate([prefix, order])), n, count)
        ev.anneal(order, kept, count, *temps, seed + k, prefix=prefix)
        return np.concatenate([prefix, kept])

    best = run(rest.copy(), moves, 0)
    if screen:
        fwd = np.sort(rest)  # vertex ids follow the computation: forward's order
        screened = min((run(o.copy(), max(1, moves // screen), k + 1) for k, o in enumerate((fwd, fwd[::-1]))),
                       key=ev.cost)
        if ev.cost(screened) < ev.cost(best):
            best = min(screened, run(screened[split:].copy(), moves, 3), key=ev.cost)
    return best


def _chunk_path(out: str, split: str, number: int) -> str:
    return os.path.join(out, "chunks", f"{split}-{number:05d}.parquet")


def _chunk_key(identity: dict, hashes: list) -> str:
    return hashlib.sha256(json.dumps([identity, hashes]).encode()).hexdigest()[:16]


def _chunk_done(path: str, key: str) -> bool:
    import pyarrow.parquet as pq

    if not os.path.exists(path):
        return False
    try:
        return json.loads(pq.read_schema(path).metadata[_META_KEY]).get("key") == key
    except Exception:  # noqa: BLE001 - unreadable: redo it
        return False


def policy_digest(policy: str) -> str:
    """sha256 of a model directory's weights and config: labels of the policy's states are
    redone when the policy changes."""
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        path = os.path.join(policy, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{policy!r} is not a model directory (no {name}); give the directory "
                                    f"of a trained model, e.g. alphagrad/pretrained or RUN/best_model")
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


_AGENTS: dict = {}


def _player(policy: str, graph, scale: float):
    """The policy's player on ``graph`` (the model is loaded once per process)."""
    from alphagrad.agent import from_pretrained

    if policy not in _AGENTS:
        _AGENTS[policy] = from_pretrained(policy)
    return _AGENTS[policy].player(graph, scale)


def _run_chunk(data_dir: str, split: str, start: int, stop: int, path: str, key: str, config: LabelConfig,
               policy: str | None = None) -> int:
    """Labels rows ``start:stop`` of ``split`` and writes them atomically to ``path``."""
    import datasets as hf
    import pyarrow as pa
    import pyarrow.parquet as pq

    from data_gen.dataset import row_to_graph

    ds = hf.load_from_disk(data_dir)[split]
    rows = []
    for r in ds.select(range(start, stop)):
        g = row_to_graph(r)
        if policy is None:
            rows.append(label_graph(g, config, r["best_baseline"]))
            continue
        player = _player(policy, g, r["best_baseline"])
        if config.rollouts:
            rows.extend(rollout_rows(g, config, r["best_baseline"], player))
            continue
        if config.candidates:
            rows.append(improvement_row(g, config, r["best_baseline"], player))
            continue
        played = player.play(0.0)
        rows.extend(label_graph(g, config, r["best_baseline"], player, k, played) for k in range(config.splits))
    table = pa.Table.from_pylist(rows, schema=features(config.rollouts > 0).arrow_schema).replace_schema_metadata(
        {_META_KEY: json.dumps({"key": key}).encode()})
    tmp = f"{path}.tmp-{os.getpid()}"
    pq.write_table(table, tmp)
    os.replace(tmp, path)
    return stop - start


def build_labels(data_dir: str, config: LabelConfig = LabelConfig(), num_proc: int = 1,
                 progress: bool = True, limit: int | None = None, validation_limit: int | None = 256,
                 policy: str | None = None, name: str = "labels") -> dict:
    """Labels (or resumes labelling) the train and validation graphs of the dataset in
    ``data_dir``; writes ``data_dir/name``. ``limit``: at most this many graphs per
    split (a prefix; for smoke runs); ``validation_limit``: at most this many validation
    graphs (the trainer validates on a prefix of the split). ``policy``: a model
    directory whose own states are labelled (DAgger rounds; train split only: validation
    reads the annealed labels). Returns ``{split: rows}``."""
    import datasets as hf
    from tqdm.auto import tqdm

    if isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc = {num_proc!r} must be an integer >= 1")
    if not name or os.sep in name or name.startswith("."):
        raise ValueError(f"name = {name!r} must be a plain directory name, like 'labels' or 'dagger-1'")
    try:
        dd = hf.load_from_disk(data_dir)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"no dataset in {data_dir!r}: build one first with `python -m data_gen build "
                                f"--out {data_dir} ...`") from e
    if (config.splits != 1 or config.depth != WHOLE_GAME) and policy is None:
        raise ValueError(f"splits = {config.splits} and depth = {config.depth} choose which of a policy's states "
                         f"are labelled; give the model with policy=MODEL (--policy), or leave them at 1 and "
                         f"{WHOLE_GAME} for annealed labels")
    if (config.rollouts or config.candidates) and policy is None:
        raise ValueError("rollouts and candidates label a policy's own play; give the model with policy=MODEL "
                         "(--policy)")
    identity = config.identity(policy is not None)
    if policy is not None:
        identity["policy_sha256"] = policy_digest(policy)
        validation_limit = 0
    out = os.path.join(data_dir, name)
    os.makedirs(os.path.join(out, "chunks"), exist_ok=True)
    for fname in os.listdir(os.path.join(out, "chunks")):
        if ".tmp-" in fname:
            os.remove(os.path.join(out, "chunks", fname))
    jobs, done = [], []
    for split in LABEL_SPLITS:
        n = len(dd[split]) if limit is None else min(limit, len(dd[split]))
        if split == "validation" and validation_limit is not None:
            n = min(n, validation_limit)
        hashes = list(dd[split].select(range(n))["graph_hash"])
        for number, start in enumerate(range(0, n, config.chunk_size)):
            stop = min(n, start + config.chunk_size)
            path = _chunk_path(out, split, number)
            key = _chunk_key(identity, hashes[start:stop])
            (done if _chunk_done(path, key) else jobs).append((split, start, stop, path, key))
    total = sum(j[2] - j[1] for j in jobs + done)
    bar = tqdm(total=total, initial=total - sum(j[2] - j[1] for j in jobs), unit="graph", desc="labelling",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)
    try:
        if num_proc == 1:
            for j in jobs:
                bar.update(_run_chunk(data_dir, *j, config, policy))
        else:
            ctx = multiprocessing.get_context("spawn")
            with concurrent.futures.ProcessPoolExecutor(num_proc, mp_context=ctx) as pool:
                futures = [pool.submit(_run_chunk, data_dir, *j, config, policy) for j in jobs]
                for f in concurrent.futures.as_completed(futures):
                    bar.update(f.result())
    finally:
        bar.close()
    return _assemble(out, identity, sorted(jobs + done))


def _assemble(out: str, identity: dict, chunks: list) -> dict:
    import datasets as hf

    bars = hf.is_progress_bar_enabled()
    hf.disable_progress_bars()
    try:
        return _write(out, identity, chunks)
    finally:
        if bars:
            hf.enable_progress_bars()


def _write(out: str, identity: dict, chunks: list) -> dict:
    import datasets as hf
    import pyarrow as pa
    import pyarrow.parquet as pq

    from data_gen.dataset import save_dataset_dict, write_json

    feats = features("rollouts" in identity)
    splits = {}
    for split in LABEL_SPLITS:
        tables = [pq.read_table(c[3]).replace_schema_metadata(None) for c in chunks if c[0] == split]
        table = pa.concat_tables(tables) if tables else feats.arrow_schema.empty_table()
        splits[split] = hf.Dataset(table.cast(feats.arrow_schema), info=hf.DatasetInfo(features=feats))
    save_dataset_dict(hf.DatasetDict(splits), out)
    rows = {s: len(splits[s]) for s in LABEL_SPLITS}
    write_json(os.path.join(out, "labels.json"), {"config": identity, "rows": rows})
    return rows


def load_labels(data_dir: str, name: str = "labels"):
    """The label DatasetDict ``data_dir/name``, or a clear error if it is missing or of
    another schema version (rebuild it with ``python -m data_gen label``)."""
    import datasets as hf

    out = os.path.join(data_dir, name)
    manifest = os.path.join(out, "labels.json")
    how = f"python -m data_gen label --data {data_dir}" + ("" if name == "labels" else f" --name {name} --policy MODEL")
    if not os.path.exists(manifest):
        raise FileNotFoundError(f"no labels in {out!r}: make them with `{how}`")
    with open(manifest) as f:
        version = json.load(f)["config"].get("label_schema_version")
    if version != LABEL_SCHEMA_VERSION:
        raise ValueError(f"the labels in {out!r} have schema version {version}, this trainer reads version "
                         f"{LABEL_SCHEMA_VERSION}: rebuild them with `{how}` (after deleting {out})")
    return hf.load_from_disk(out)
