"""Loop-periodic elimination orders: one pattern for every iteration of a traced loop.

A ``lax.fori_loop``, ``scan`` or ``while_loop`` traces unrolled, into a graph whose
iterations repeat (``Program.vertex_loops`` says which iteration made each vertex). An order
that eliminates those iterations one after the other (first to last, or last to first), each
in the same pattern, is one the interpreter can run as a ``lax.scan`` over the loop: last to
first in every graph, first to last in graphs of more than ``interpreter.CHUNK_ABOVE``
intermediates (:data:`alphagrad.interpreter.LOOP_SCAN`, which also checks that the
iterations really do the same thing, and runs them unrolled where they do not). A scanned
program compiles about as fast as forward or reverse mode's, whatever the pattern.
:func:`periodic` anneals that pattern, one permutation of an iteration's intermediates,
starting from forward and from reverse mode (which are periodic: the pattern in trace
order, or backwards). It costs more multiplications than annealing whole orders; which runs
faster depends on the program and the batch (``docs/results.md``, "On a TPU v5e: the
real-sized programs"), so it is one more candidate where the clock decides, not a
replacement for :func:`alphagrad.anneal.anneal`.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random
import time

from alphagrad.graph import Graph


@dataclasses.dataclass(frozen=True)
class Iterations:
    """The intermediates of ``graph``'s longest loop, split by iteration.

    Attributes:
      blocks: the iterations of the common size, each its intermediates in trace order
        (position ``p`` of one block does what position ``p`` of the others does).
      before, after: the other intermediates, traced before or after the first block.
    """

    blocks: tuple
    before: tuple
    after: tuple

    @property
    def size(self) -> int:
        return len(self.blocks[0])

    def order(self, pattern, forward: bool) -> list[int]:
        """The full order: ``before`` in trace order, the blocks first to last, each in
        ``pattern`` (positions), then ``after``; for ``forward=False`` all of it backwards
        except the pattern (``after`` reversed, blocks last to first, ``before`` reversed)."""
        if forward:
            out = list(self.before)
            for block in self.blocks:
                out += [block[p] for p in pattern]
            return out + list(self.after)
        out = list(reversed(self.after))
        for block in reversed(self.blocks):
            out += [block[p] for p in pattern]
        return out + list(reversed(self.before))


def iterations(graph: Graph, min_iterations: int = 2) -> Iterations | None:
    """``graph``'s loop iterations as :class:`Iterations`: of the outermost loop with the
    most intermediates, the iterations of its most common size (at least
    ``min_iterations`` of them); None where the trace recorded no such loop."""
    labels = graph.program.vertex_loops
    by_loop: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    for v in graph.intermediates:
        if v in labels:
            loop, it = labels[v][0]
            by_loop[loop][it].append(v)
    if not by_loop:
        return None
    its = max(by_loop.values(), key=lambda d: sum(map(len, d.values())))
    size, count = collections.Counter(len(b) for b in its.values()).most_common(1)[0]
    if count < min_iterations:
        return None
    blocks = tuple(tuple(sorted(its[it])) for it in sorted(its) if len(its[it]) == size)
    inside = {v for b in blocks for v in b}
    first = blocks[0][0]
    rest = sorted(v for v in graph.intermediates if v not in inside)
    return Iterations(blocks, tuple(v for v in rest if v < first), tuple(v for v in rest if v > first))


def periodic(graph: Graph, budget_s: float | None = 2.0, moves: int | None = None, seed: int = 0,
             convention: str = "exact", evaluator=None) -> list[int]:
    """The cheapest loop-periodic order found: simulated annealing of the pattern (a move
    takes one position elsewhere), half the budget from forward mode's pattern and half
    from reverse mode's, each cooling linearly from 2% of its start's cost.

    Args:
      budget_s: seconds in all; ``moves``: a fixed number of moves per start instead
        (deterministic for a seed).
      evaluator: an :class:`alphagrad.evaluator.Evaluator` of ``graph`` in ``convention``
        (made when None).

    Raises:
      ValueError: ``graph`` has no loop of two or more iterations (write the loop with
        ``lax.fori_loop`` or ``lax.scan``, or use :func:`alphagrad.anneal.anneal`);
        ``budget_s`` and ``moves`` both None or not positive.
    """
    if moves is None and (budget_s is None or not budget_s > 0):
        raise ValueError(f"periodic needs budget_s > 0 or moves, got budget_s={budget_s!r}, moves={moves!r}")
    if moves is not None and (isinstance(moves, bool) or not isinstance(moves, int) or moves < 0):
        raise ValueError(f"moves must be an integer >= 0, got {moves!r}")
    its = iterations(graph)
    if its is None:
        raise ValueError("the graph has no loop of two or more iterations to repeat a pattern over; write the "
                         "loop with lax.fori_loop or lax.scan (or use alphagrad.baselines.anneal)")
    if evaluator is None:
        from alphagrad.evaluator import Evaluator

        evaluator = Evaluator(graph, convention)
    best, best_cost = None, math.inf
    for k, forward in enumerate((True, False)):
        rng = random.Random(seed * 2 + k)
        pattern = list(range(its.size)) if forward else list(range(its.size))[::-1]
        order = its.order(pattern, forward)
        cost = evaluator.cost(order)
        if cost < best_cost:
            best, best_cost = order, cost
        start, t0, done = 0.02 * cost, time.perf_counter(), 0
        while True:
            left = (1 - done / moves) if moves is not None else 1 - (time.perf_counter() - t0) / (budget_s / 2)
            if left <= 0 or its.size < 2:
                break
            i, j = rng.randrange(its.size), rng.randrange(its.size)
            trial = pattern[:]
            trial.insert(j, trial.pop(i))
            order = its.order(trial, forward)
            c = evaluator.cost(order)
            done += 1
            if c <= cost or rng.random() < math.exp(max((cost - c) / max(start * left, 1e-9), -700.0)):
                pattern, cost = trial, c
                if c < best_cost:
                    best, best_cost = order, c
    return best
