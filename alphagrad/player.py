"""How the policy network plays: a compiled copy of its decoder and the games it plays.

:func:`rollout` plays the network's policy on one graph in compiled code: the encoder ran
once (per stretch of moves, for a network of several encodings), each move re-scores
only the vertices within two hops of the eliminated one (its neighbours alone for a
model whose lookahead and pressure weights are zero) with the decoder's weights
(:func:`alphagrad.network.decoder_weights`, bundled with the cost scale as one
:class:`Decoder`; run only for a vertex whose raw numbers changed), then takes the best
(``temperature`` 0) or a Gumbel-perturbed best (a sample of ``softmax(logits / T)``).
What it reads of each state is :mod:`alphagrad.features`.

:class:`Player` holds one graph's encoding and plays orders on it;
:class:`ControlPlayer` plays network-free priors in the same code.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from alphagrad.evaluator import OVERFLOW, Evaluator, after, copy_state, eliminate
from alphagrad.features import (ABSOLUTE, ENCODER_ARGS, FRONTIER, GROWTH, LOG_UNIT, LOOKAHEAD, NUM_DYNAMIC, NUM_RAW,
                                PRESSURE, RECENT, Reads, Scratch, Tables, graph_inputs, moves_per_encoding, neighbours,
                                new_scratch, pad_inputs, padded, raw_numbers)
from alphagrad.graph import Graph


class Decoder(NamedTuple):
    """What the rollout scores a vertex with: the decoder's weights on one graph
    (:func:`alphagrad.network.decoder_weights`) and the cost scale. With ``D = 0`` the
    policy is network-free: logit = ``static[v] - beta * cost(v) / scale`` (the controls
    of :class:`ControlPlayer`)."""

    H1: np.ndarray  # [V, D] float64: the encoder's output through the first layer, bias included
    Wd: np.ndarray  # [F, D]: the first layer on the dynamic features (F <= NUM_DYNAMIC for older models)
    W2: np.ndarray  # [D, D]
    b2: np.ndarray  # [D]
    w3: np.ndarray  # [D]
    b3: float
    static: np.ndarray  # [V] a network-free prior's fixed logits ([0] for a network)
    beta: float  # a network-free prior's weight on -cost / scale
    inv_scale: float  # 1 / the graph's cost scale (the best baseline's cost)


class _Layers(NamedTuple):
    """The decoder's working arrays: its input features and its two hidden layers."""

    feats: np.ndarray  # [F]
    a1: np.ndarray  # [D]
    a2: np.ndarray  # [D]


class _Game(NamedTuple):
    """A rollout's working arrays."""

    alive: np.ndarray  # [V] bool: still to eliminate
    recent: np.ndarray  # [V] int64: 1 where the last move touched the vertex (for a decoder that reads it)
    logits: np.ndarray  # [V] float64
    last: np.ndarray  # [V, NUM_RAW] int64: the raw numbers each logit was scored on (-1 at first)
    now: np.ndarray  # [NUM_RAW] int64: the raw numbers being scored
    scratch: Scratch  # shared with the evaluator's eliminate
    layers: _Layers
    reads: Reads


#: tanh for the decoder's GELU: the odd rational of degrees 13/6 that Eigen and XLA use
#: for float32 tanh (within 3e-7 of it, float32's rounding), clamped where tanh rounds to
#: +-1. Plain arithmetic that inlines, where ``np.tanh`` is a libm call per value (~27 ns,
#: 128 a decoder call: 3.4 us a call in isolation with it, 2.5 us without, one run
#: each; a greedy order at 2,059 intermediates 0.24-0.27 s instead of 0.31-0.34 s, side
#: by side).
_TANH_CLAMP = 7.90531110763549805
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


@numba.njit(cache=True, nogil=True, inline="always")
def _tanh(x):
    x = min(max(x, -_TANH_CLAMP), _TANH_CLAMP)
    x2 = x * x
    p = _TANH_P[0]
    for c in _TANH_P[1:]:
        p = p * x2 + c
    q = _TANH_Q[0]
    for c in _TANH_Q[1:]:
        q = q * x2 + c
    return x * p / q


@numba.njit(cache=True, nogil=True, inline="always")
def _gelu(x):
    return 0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


@numba.njit(cache=True, nogil=True, inline="always")
def _signed_log1p(x, inv_scale):
    """``sign(x) * log1p(|x| * inv_scale)``, as :func:`alphagrad.features.dynamic_features`
    has it."""
    return np.sign(x) * np.log1p(abs(float(x)) * inv_scale)


@numba.njit(cache=True, nogil=True, _nrt=False)
def _logit(v, raw, decoder, layers):
    """The decoder's logit for vertex ``v`` with raw numbers ``raw`` (as
    :func:`alphagrad.features.observe` has them)."""
    H1, Wd, W2, b2, w3 = decoder.H1, decoder.Wd, decoder.W2, decoder.b2, decoder.w3
    inv_scale = decoder.inv_scale
    feats, a1, a2 = layers.feats, layers.a1, layers.a2
    c, i, o = float(raw[0]), float(raw[1]), float(raw[2])
    if H1.shape[1] == 0:  # a network-free prior
        return decoder.static[v] - decoder.beta * c * inv_scale
    feats[0] = np.log1p(c * inv_scale)
    feats[1] = np.log1p(i)
    feats[2] = np.log1p(o)
    feats[3] = np.log1p(i * o)
    feats[4] = 1.0 if c == 0 else 0.0
    if feats.shape[0] > LOOKAHEAD:
        feats[LOOKAHEAD] = _signed_log1p(raw[3], inv_scale)
    if feats.shape[0] > PRESSURE:
        feats[PRESSURE] = _signed_log1p(raw[4], inv_scale)
    if feats.shape[0] > FRONTIER + 1:
        feats[FRONTIER] = raw[5] / max(i, 1.0)
        feats[FRONTIER + 1] = raw[6] / max(o, 1.0)
    if feats.shape[0] > RECENT:
        feats[RECENT] = raw[7]
    if feats.shape[0] > ABSOLUTE + 2:
        feats[ABSOLUTE] = np.log1p(c) / LOG_UNIT
        feats[ABSOLUTE + 1] = _signed_log1p(raw[3], 1.0) / LOG_UNIT
        feats[ABSOLUTE + 2] = _signed_log1p(raw[4], 1.0) / LOG_UNIT
    if feats.shape[0] > GROWTH:
        feats[GROWTH] = _signed_log1p(raw[8], 1.0) / LOG_UNIT
    # row by row over the weights (contiguous, so the inner loops vectorise), each sum in
    # the order of a dot product: the same numbers as the network's column by column
    D = H1.shape[1]
    for d in range(D):
        a1[d] = H1[v, d]
    for f in range(feats.shape[0]):
        x = feats[f]
        for d in range(D):
            a1[d] += x * Wd[f, d]
    for d in range(D):
        a1[d] = _gelu(a1[d])
        a2[d] = b2[d]
    for e in range(D):
        x = a1[e]
        for d in range(D):
            a2[d] += x * W2[e, d]
    out = decoder.b3
    for d in range(D):
        out += _gelu(a2[d]) * w3[d]
    return out


@numba.njit(cache=True, nogil=True, _nrt=False)
def _score(state, v, tables, decoder, game):
    """Sets ``game.logits[v]`` to ``v``'s logit now (its raw numbers into the scratch
    ``game.now``), running the decoder only if they differ from those it last saw
    (``game.last[v]``): within two hops of a move most are unchanged. Compiled without
    reference counting, not inlined: reading the arrays out of the game's tuples would
    otherwise count references at every call (a tenth of a rollout's time)."""
    now, last = game.now, game.last
    raw_numbers(state, v, game.alive, tables, game.scratch, game.reads, game.recent, now)
    same = True
    for f in range(NUM_RAW):
        same = same and last[v, f] == now[f]
        last[v, f] = now[f]
    if not same:
        game.logits[v] = _logit(v, now, decoder, game.layers)


@numba.njit(cache=True, nogil=True)
def _reads(decoder):
    """Which dearer raw numbers the decoder reads (:class:`alphagrad.features.Reads`), and
    whether it reads the last move's touch: not for a network-free prior, nor for a
    model whose weight on one is zero (one trained before it existed)."""
    Wd, net = decoder.Wd, decoder.H1.shape[1] > 0
    ahead = Wd.shape[0] > LOOKAHEAD and net and (
        np.any(Wd[LOOKAHEAD] != 0) or (Wd.shape[0] > ABSOLUTE + 1 and np.any(Wd[ABSOLUTE + 1] != 0)))
    press = Wd.shape[0] > PRESSURE and net and (
        np.any(Wd[PRESSURE] != 0) or (Wd.shape[0] > ABSOLUTE + 2 and np.any(Wd[ABSOLUTE + 2] != 0)))
    grow = Wd.shape[0] > GROWTH and net and np.any(Wd[GROWTH] != 0)
    track = Wd.shape[0] > RECENT and net and np.any(Wd[RECENT] != 0)
    return Reads(ahead, press, grow), track


@numba.njit(cache=True, nogil=True)
def rollout(state0, inter, tables, decoder, temperature, seed, moves, touched0):
    """Plays the policy from ``state0`` for ``moves`` moves (at most ``len(inter)``, the
    vertices left to eliminate, ascending): ``(order, touched, flag)``, ``touched`` the
    neighbours the last move's vertex had (``touched0``: the move before ``state0``'s),
    ``flag`` :data:`OVERFLOW` if a pool filled up. ``tables``: the graph's
    :class:`alphagrad.features.Tables`; ``decoder``: a :class:`Decoder`. ``temperature``
    0: the highest logit (the smallest id on ties); else a sample of ``softmax(logits /
    temperature)`` at every move (Gumbel-max, seeded)."""
    work = copy_state(state0)
    V = work[0].shape[0]
    n = min(inter.shape[0], moves)
    np.random.seed(seed)
    empty = np.zeros(0, np.int64)
    D = decoder.H1.shape[1]
    # the lookahead, the pressure and the growth change up to two hops from a move; the
    # last move's touch flags its neighbours until the next move, re-scored when it goes
    reads, track = _reads(decoder)
    look = reads.lookahead or reads.pressure or reads.growth
    game = _Game(np.zeros(V, np.bool_), np.zeros(V, np.int64), np.full(V, -np.inf),
                 np.full((V, NUM_RAW), -1, np.int64), np.zeros(NUM_RAW, np.int64), new_scratch(V),
                 _Layers(np.zeros(decoder.Wd.shape[0]), np.zeros(D), np.zeros(D)), reads)
    alive, recent, logits, mark, pos = game.alive, game.recent, game.logits, game.scratch.mark, game.scratch.pos
    for v in inter:
        alive[v] = True
    prev = np.empty(V, np.int64)
    nprev = touched0.shape[0]
    prev[:nprev] = touched0
    if track:
        for t in range(nprev):
            recent[prev[t]] = 1
    for v in inter:
        _score(work, v, tables, decoder, game)
    touched = np.empty(V, np.int64)
    spare = np.empty(V, np.int64)
    seen = np.zeros(V, np.int64)
    order = np.empty(n, np.int64)
    for step in range(n):
        best = -1
        best_score = -np.inf
        for v in inter:
            if alive[v]:
                s = logits[v]
                if temperature > 0:
                    s = s / temperature - np.log(-np.log(np.random.random() + 1e-300) + 1e-300)
                if best < 0 or s > best_score:
                    best = v
                    best_score = s
        nt = neighbours(work, best, touched, 0).shape[0]
        n0 = nt
        if track:
            for t in range(nprev):
                recent[prev[t]] = 0
            for t in range(nt):
                recent[touched[t]] = 1
        m = eliminate(work, best, tables.compose, tables.join, tables.cost, mark, pos, empty)
        if m < 0:
            return order, prev[:0], OVERFLOW
        alive[best] = False
        order[step] = best
        if look:  # these change up to two hops away: the neighbours' neighbours too
            stamp = step + 1
            for t in range(nt):
                seen[touched[t]] = stamp
            n1 = nt
            for t in range(n1):
                for w in neighbours(work, touched[t], spare, 0):
                    if seen[w] != stamp:
                        seen[w] = stamp
                        touched[nt] = w
                        nt += 1
        for t in range(nt):
            u = touched[t]
            if alive[u]:
                _score(work, u, tables, decoder, game)
        if track:
            for t in range(nprev):
                u = prev[t]
                if alive[u]:
                    _score(work, u, tables, decoder, game)
        prev[:n0] = touched[:n0]
        nprev = n0
    return order, prev[:nprev].copy(), np.int64(0)


_ENCODERS: dict = {}


def embed(net, params, inputs: dict) -> tuple[np.ndarray, float]:
    """The encoder's vertex embeddings ``[V, D]`` for one graph's
    :func:`alphagrad.features.graph_inputs`, and the seconds spent compiling (0 when this
    padded size was compiled before; compiled encoders are kept per network and padded
    size for the process)."""
    import time

    import jax

    from alphagrad.network import PolicyNet

    n = inputs["static"].shape[0]
    args = pad_inputs(inputs, padded(n, 64), padded(inputs["src"].shape[0], 128))
    args = tuple(args[k] for k in ENCODER_ARGS)
    key = (net, args[0].shape, args[1].shape)
    seconds = 0.0
    if key not in _ENCODERS:
        t = time.perf_counter()
        fn = jax.jit(lambda p, *a: net.apply(p, *a, method=PolicyNet.encode))
        _ENCODERS[key] = fn.lower(params, *args).compile()
        seconds = time.perf_counter() - t
    return np.asarray(_ENCODERS[key](params, *args))[:n], seconds


class Player:
    """The network's policy on one graph: the encoder runs once (:func:`embed`), then every
    order is played in compiled code (:func:`rollout`), re-scoring only the neighbours of
    each eliminated vertex; a network of ``encodings`` > 1 also encodes the graph left
    every ``ceil(n / encodings)`` moves (:class:`alphagrad.network.NetworkConfig`).

    Args:
      net, params: a :class:`alphagrad.network.PolicyNet` and its variables.
      graph: the graph; ``ev`` its evaluator (built if None).
      scale: the graph's cost scale (the best baseline's cost), which the network's cost
        features are relative to.
      encode: False skips the encoder (zero embeddings): the player then runs the same
        compiled features and rollout, without the network's knowledge (a warm-up).

    ``weights`` holds the decoder's arrays (:func:`alphagrad.network.decoder_weights`) on
    the graph's embeddings.
    """

    def __init__(self, net, params, graph: Graph, scale: float, ev: Evaluator | None = None, encode: bool = True):
        from alphagrad.network import decoder_weights

        self._bind(graph, scale, ev)
        self.net, self.params, self.encode = net, params, encode
        self.encodings = net.config.encodings
        self.compile_seconds = 0.0
        inputs = graph_inputs(graph, self.ev, self.scale)
        if encode:
            self.weights = self._weights(inputs)
        else:  # zero embeddings: plays the same compiled code (to compile it), not the network's orders
            self.weights = decoder_weights(params, np.zeros((graph.num_vertices, net.config.dim), np.float32))

    def _bind(self, graph: Graph, scale: float, ev: Evaluator | None):
        """What every player keeps of its graph: the graph, its evaluator and rule tables,
        the cost scale and the intermediates."""
        self.graph = graph
        self.ev = ev if ev is not None else Evaluator(graph, "exact")
        self.tables = Tables.of(self.ev)
        self.scale = float(max(scale, 1))
        self.inter = np.asarray(graph.intermediates, np.int64)

    static = np.zeros(0)
    beta = 0.0
    encodings = 1

    def decoder(self, weights: tuple | None = None) -> Decoder:
        """The :class:`Decoder` of ``weights`` (default :attr:`weights`) on this graph."""
        weights = self.weights if weights is None else weights
        return Decoder(*weights, self.static, float(self.beta), 1.0 / self.scale)

    def play(self, temperature: float = 0.0, seed: int = 0) -> list[int]:
        """One order: greedy (``temperature`` 0) or sampled at ``temperature``."""
        n = len(self.inter)
        if n == 0:
            return []
        ev = self.ev
        step = moves_per_encoding(n, self.encodings)
        order: list[int] = []
        touched = np.zeros(0, np.int64)
        weights = self.weights
        for start in range(0, n, step):
            done = np.asarray(order, np.int64)
            play = rollout
            if start:  # from the state after the moves so far, on the graph left encoded anew
                if self.encode:
                    weights = self._weights(graph_inputs(self.graph, ev, self.scale, done))
                play = _rollout_after(done, ev)
            moves, touched, _ = ev.run(play, np.setdiff1d(self.inter, done), self.tables, self.decoder(weights),
                                       float(temperature), int(seed) + start, step, touched)
            order += [int(v) for v in moves]
        return order

    def play_from(self, prefix, temperature: float = 0.0, seed: int = 0, moves: int | None = None) -> list[int]:
        """The moves the policy plays after ``prefix`` (``moves`` of them, default all that
        are left), from the state the prefix leaves, the last move's touch included: what
        :meth:`play` would go on with had it played ``prefix``. Encodes the graph once
        (a network of one encoding)."""
        if self.encodings != 1:
            raise ValueError(f"play_from plays a network of one encoding, this one encodes {self.encodings} times")
        ev, prefix = self.ev, np.asarray(prefix, np.int64)
        left = np.setdiff1d(self.inter, prefix)
        count = len(left) if moves is None else min(int(moves), len(left))
        if count == 0:
            return []

        def play(state0, *args):
            touched = np.zeros(0, np.int64)
            if len(prefix):
                before, flag = after(state0, prefix[:-1], ev.compose, ev.join, ev.cost_table)
                if flag == OVERFLOW:
                    return None, None, flag
                touched = neighbours(before, prefix[-1], np.empty(state0[0].shape[0], np.int64), 0).copy()
                state0, flag = after(before, prefix[-1:], ev.compose, ev.join, ev.cost_table)
                if flag == OVERFLOW:
                    return None, None, flag
            return rollout(state0, *args, touched)

        out, _, _ = ev.run(play, left, self.tables, self.decoder(), float(temperature), int(seed), count)
        return [int(v) for v in out]

    def _weights(self, inputs: dict) -> tuple:
        """The decoder's weights (:func:`alphagrad.network.decoder_weights`) on the
        embeddings of ``inputs`` (:func:`alphagrad.features.graph_inputs`); adds the
        encoder's compile time to ``compile_seconds``."""
        from alphagrad.network import decoder_weights

        h, seconds = embed(self.net, self.params, inputs)
        self.compile_seconds += seconds
        return decoder_weights(self.params, h)


def _rollout_after(done, ev: Evaluator):
    """:func:`rollout` from the state after the moves ``done`` (for :meth:`Evaluator.run`)."""

    def play(state0, *args):
        state, flag = after(state0, done, ev.compose, ev.join, ev.cost_table)
        return (None, None, flag) if flag == OVERFLOW else rollout(state, *args)

    return play


#: The network-free priors of :class:`ControlPlayer`: what learning is measured against.
CONTROLS = ("uniform", "markowitz", "random")
#: The Markowitz prior's one parameter: logits are ``-cost / (MARKOWITZ_T * scale)``.
MARKOWITZ_T = 0.1


class ControlPlayer(Player):
    """A :class:`Player` without a network, for controls in the same schedule:
    ``uniform`` (equal logits: greedy is the smallest id first, samples are uniformly
    random orders), ``markowitz`` (logits ``-cost / (MARKOWITZ_T * scale)``: greedy is the
    Markowitz order), ``random`` (a fixed random score per vertex, drawn from ``seed``)."""

    def __init__(self, kind: str, graph: Graph, scale: float, ev: Evaluator | None = None, seed: int = 0):
        if kind not in CONTROLS:
            raise ValueError(f"unknown control {kind!r}; use one of {list(CONTROLS)}")
        self._bind(graph, scale, ev)
        self.compile_seconds = 0.0
        V = graph.num_vertices
        z = np.zeros((0, 0))
        self.weights = (np.zeros((V, 0)), np.zeros((NUM_DYNAMIC, 0)), z, np.zeros(0), np.zeros(0), 0.0)
        self.static = np.random.default_rng(seed).standard_normal(V) if kind == "random" else np.zeros(V)
        self.beta = 1.0 / MARKOWITZ_T if kind == "markowitz" else 0.0
