"""The classic elimination orders and the search that improves on them, in one place for
users (``alphagrad.baselines.markowitz(graph)``); each takes a traced graph and returns a
list of vertex ids.

* :func:`forward`, :func:`reverse`, :func:`markowitz`, :func:`optimal`: the classic
  orders (:mod:`alphagrad.orders`).
* :func:`descend`, :func:`anneal` (with its schedule, :class:`AnnealSettings`),
  :func:`anneal_dense`: local search from them (:mod:`alphagrad.anneal`).
* :func:`periodic`: the best order that repeats one pattern over a traced loop's
  iterations, which the interpreter runs as a ``lax.scan`` (:mod:`alphagrad.periodic`).
* :func:`resolve_order`: a name, a sequence of vertex ids or a result object -> a
  checked order (:mod:`alphagrad.scoring`, the door of :func:`alphagrad.cost` and
  :func:`alphagrad.jacobian`).

Nothing inside ``alphagrad`` imports this module: it only re-exports.
"""

from alphagrad.anneal import AnnealSettings, anneal, anneal_dense, default_threads, descend
from alphagrad.orders import forward, markowitz, optimal, reverse
from alphagrad.periodic import periodic
from alphagrad.scoring import resolve_order

__all__ = ["forward", "reverse", "markowitz", "optimal", "descend", "anneal", "anneal_dense", "periodic",
           "AnnealSettings", "default_threads", "resolve_order"]
