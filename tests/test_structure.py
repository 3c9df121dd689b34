"""The structure algebra is exact: products and sums of structured Jacobians, expanded to
dense arrays, equal the dense products and sums, for every rule-table entry of real graphs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import alphagrad as ag
from alphagrad import engine
from alphagrad import structure as st
from alphagrad.evaluator import Evaluator


def _random_value(s, rng):
    """Normal entries for a value; for an index map, a random 0/1 table of its kind (at
    most one entry per output row, per input column, or both)."""
    if not s.index_map:
        return None if s.value_vars is None else rng.standard_normal(s.value_shape)
    sizes = s.var_sizes()
    rows = [v for v in s.value_vars if v in s.out_vars]
    cols = [v for v in s.value_vars if v not in s.out_vars]
    nr, nc = int(np.prod([sizes[v] for v in rows])), int(np.prod([sizes[v] for v in cols]))
    row_map, col_map = st.MAP_KINDS[s.index_map]
    t = np.zeros((nr, nc), np.int8)
    if row_map:
        free = list(rng.permutation(nc))
        for r in range(nr):
            if rng.random() < 0.8 and (free or not col_map):
                t[r, free.pop() if col_map else rng.integers(nc)] = 1
    else:
        for c in range(nc):
            if rng.random() < 0.8:
                t[rng.integers(nr), c] = 1
    order = rows + cols
    return np.transpose(t.reshape([sizes[v] for v in order]), [order.index(v) for v in s.value_vars])


def _dense_product(a, b, da, db):
    da = np.asarray(da).reshape(int(np.prod(a.out_shape)), int(np.prod(a.in_shape)))
    db = np.asarray(db).reshape(int(np.prod(b.out_shape)), int(np.prod(b.in_shape)))
    return (da @ db).reshape(a.out_shape + b.in_shape)


def _graphs():
    def mixed(x, W, z):
        h = jnp.tanh(W @ x)
        h = (h - h.mean()) / jnp.sqrt(h.var() + 1e-5)
        y = jnp.einsum("bij,j->bi", z, h[:3]) + jnp.cumsum(z, axis=2).sum(-1)
        return jax.nn.softmax(h), y.reshape(-1), jnp.concatenate([x, x[::-1]])

    rng = np.random.default_rng(0)
    args = (rng.random(4), rng.random((8, 4)), rng.random((2, 3, 3)))
    return [("mixed", ag.trace(mixed, *args)),
            ("Encoder", ag.trace(ag.examples.get("Encoder").fn, *ag.examples.get("Encoder").args))]


def test_table_products_are_composed_when_asked_and_agree_with_the_tables():
    """Rule tables keep each product's result and cost; the einsum that computes it is
    composed the first time the interpreter (or anyone) asks for it."""
    from alphagrad import rules

    T = rules.build_tables(ag.trace(ag.examples.get("Encoder").fn, *ag.examples.get("Encoder").args))
    pairs = {(int(a), int(b)) for a, b in np.argwhere(T.compose > 0) if a > 0 and b > 0}
    assert set(T.products) == pairs and len(T.products) == len(pairs) > 100
    for a, b in sorted(pairs)[::7]:
        p = st.compose(T.structures[a], T.structures[b])
        assert T.products[(a, b)] == p and T.structures[T.compose[a, b]] == p.result
        for c in st.CONVENTIONS:
            assert T.cost[c][a, b] == min(p.cost[c], rules.COST_CAP) and T.exact_cost(c, a, b) == p.cost[c]
    incompatible = next((int(a), int(b)) for a, b in np.argwhere(T.compose == rules.INVALID) if a > 0 and b > 0)
    for pair in [(0, 1), (1, 0), incompatible, (T.size, 1)]:
        with pytest.raises(KeyError):
            T.products[pair]


def test_rule_tables_kept_on_disk_are_the_built_ones_and_a_bad_file_is_rebuilt(tmp_path, monkeypatch):
    """With ``$ALPHAGRAD_CACHE_DIR`` a later process loads a graph's tables instead of
    building them: the same structures, compose/join/cost tables and products. A damaged
    file, or one holding another graph's tables, is rebuilt with a warning; a directory
    that cannot be written warns and keeps the tables in memory."""
    import warnings

    from alphagrad import rules

    def fresh(g):  # a new process: nothing in memory
        rules._tables_cached.cache_clear()
        return rules.tables(g)

    def same(T, U):
        assert T.structures == U.structures
        for a, b in [(T.compose, U.compose), (T.join, U.join)] + [(T.cost[c], U.cost[c]) for c in st.CONVENTIONS]:
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)

    (name, g), (_, other) = _graphs()
    built = rules.build_tables(g)
    monkeypatch.setenv(rules.CACHE_ENV, str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same(fresh(g), built)  # built, then written
        [path] = (tmp_path / "tables").iterdir()
        loaded = fresh(g)  # read
    same(loaded, built)
    assert all(loaded.products[k] == built.products[k] for k in list(built.products)[::11])
    assert ag.cost(g, ag.baselines.markowitz(g)) == Evaluator(g, "exact", built).cost(ag.baselines.markowitz(g))

    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a damaged file
    with pytest.warns(UserWarning, match="rebuilding the rule tables"):
        same(fresh(g), built)
    same(fresh(g), built)  # rewritten whole
    path.write_bytes(b"")  # an empty one
    with pytest.warns(UserWarning, match="rebuilding"):
        same(fresh(g), built)
    rules._save(str(path), rules.build_tables(other))  # another graph's tables under this key
    with pytest.warns(UserWarning, match="not this graph's tables"):
        same(fresh(g), built)

    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(rules.CACHE_ENV, str(blocked))  # not a directory
    with pytest.warns(UserWarning, match="cannot keep rule tables"):
        same(fresh(g), built)
    rules._tables_cached.cache_clear()


@pytest.mark.parametrize("name,graph", _graphs())
def test_every_table_product_and_sum_is_exact(name, graph):
    T = engine.tables(graph)
    rng = np.random.default_rng(1)
    values = {k: _random_value(s, rng) for k, s in enumerate(T.structures) if s is not None}
    dense = {k: st.to_dense(s, values[k]) for k, s in enumerate(T.structures) if s is not None}
    checked = 0
    products = list(T.products.items())
    for idx in rng.permutation(len(products))[:300]:
        (a, b), p = products[idx]
        sa, sb = T.structures[a], T.structures[b]
        value, mults = st.product_value(p, values[a], values[b], xp=np)
        got = st.to_dense(p.result, value)
        want = _dense_product(sa, sb, dense[a], dense[b])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5)
        assert mults == p.cost["exact"], (sa.describe(), sb.describe())
        checked += 1
    joins = np.argwhere(T.join > 0)
    joins = joins[(joins[:, 0] > 0) & (joins[:, 1] > 0)]
    for a, b in joins[rng.permutation(len(joins))[:300]]:
        j = T.join[a, b]
        if True:
            sj = T.structures[j]
            got = st.embed_value(T.structures[a], values[a], sj, xp=np) if sj.value_vars is not None else None
            if sj.value_vars is None:
                continue  # both summands without value on the same pattern cannot give None
            got = got + st.embed_value(T.structures[b], values[b], sj, xp=np)
            np.testing.assert_allclose(
                np.asarray(st.to_dense(sj, got)), np.asarray(dense[a]) + np.asarray(dense[b]), atol=1e-5
            )
            checked += 1
    assert checked > 50


def test_make_is_canonical():
    a = st.make((3,), (3,), ["x"], ["x"], ["x"])
    b = st.make((3,), (3,), [7], [7], [7])
    assert a == b and hash(a) == hash(b)
    # size-1 axes never carry a delta or a value
    c = st.make((1, 3), (1, 3), ["p", "q"], ["p", "q"], ["p", "q"])
    assert c.value_shape == (3,)


def test_compose_costs_of_classic_cases():
    n, m, p = 3, 4, 5
    dense_mn = st.make((m,), (n,), ["o"], ["i"], ["o", "i"])
    dense_pm = st.make((p,), (m,), ["o"], ["i"], ["o", "i"])
    diag_m = st.diagonal((m,))
    ident_m = st.diagonal((m,), value=False)
    assert st.compose(dense_pm, dense_mn).cost == {"exact": p * m * n, "published": p * m * n}
    assert st.compose(diag_m, dense_mn).cost == {"exact": m * n, "published": m * n}
    assert st.compose(diag_m, diag_m).cost == {"exact": m, "published": m}
    assert st.compose(ident_m, dense_mn).cost == {"exact": 0, "published": m * n}
    assert st.compose(ident_m, ident_m).cost == {"exact": 0, "published": 1}
    # minus times minus is plus, and stays free
    neg = st.diagonal((m,), value=False, sign=-1)
    r = st.compose(neg, neg).result
    assert r.value_vars is None and r.sign == 1
    # two identical +1 paths add to the constant 2: a value
    assert st.join(ident_m, ident_m).value_vars == ()
    # a diagonal plus a dense block is dense
    assert st.join(diag_m, st.make((m,), (m,), ["o"], ["i"], ["o", "i"])).value_shape == (m, m)


def test_products_with_maps_match_dense_products_with_no_multiplication():
    rng = np.random.default_rng(3)
    structs = [
        st.make((3,), (7,), ["o"], ["i"], ["o", "i"], index_map="perm"),  # a slice
        st.make((7,), (7,), ["o"], ["i"], ["o", "i"], -1, index_map="perm"),  # a negated permutation
        st.make((7,), (3,), ["o"], ["i"], ["o", "i"], index_map="row"),  # a gather with repeats
        st.make((3,), (7,), ["o"], ["i"], ["o", "i"], index_map="col"),  # a scatter-add
        st.make((7,), (7,), ["o"], ["i"], ["o", "i"], index_map="col"),
        st.make((3, 7), (3, 7), ["b", "o"], ["b", "i"], ["o", "i"], index_map="row"),  # batched
        st.make((7,), (7,), [0], [0], [0]),  # elementwise
        st.make((7,), (7,), [0], [1], [0, 1]),  # dense
        st.make((3,), (3,), [0], [0], [0]),
        st.make((3,), (7,), [0], [1], [0, 1]),
        st.make((7,), (3,), [0], [1], None),  # a broadcast: a row map without value
        st.make((3,), (7,), [0], [1], None),  # a sum: a column map without value
        st.make((3, 7), (3, 7), [0, 1], [0, 1], [1]),
        st.make((3, 7), (3, 7), [0, 1], [0, 1], None, -1),
    ]
    checked = maps = 0
    for a in structs:
        for b in structs:
            if a.in_shape != b.out_shape or not (a.index_map or b.index_map):
                continue
            va, vb = _random_value(a, rng), _random_value(b, rng)
            p = st.compose(a, b)
            value, mults = st.product_value(p, va, vb, xp=jnp)
            dense = lambda s, v: st.to_dense(s, v).reshape(int(np.prod(s.out_shape)), -1)
            want = dense(a, va) @ dense(b, vb)
            np.testing.assert_allclose(dense(p.result, np.asarray(value) if not isinstance(value, np.ndarray) else value),
                                       want, atol=1e-6, err_msg=f"{a.describe()} . {b.describe()}")
            assert mults == p.cost["exact"] == 0
            if p.result.index_map:  # a map of the kind the structure says
                d = np.abs(dense(p.result, value))
                row_map, col_map = st.MAP_KINDS[p.result.index_map]
                assert (not row_map or d.sum(1).max() <= 1) and (not col_map or d.sum(0).max() <= 1)
                maps += 1
            checked += 1
    assert checked >= 40 and maps >= 10


@pytest.mark.parametrize("s, out_digits, in_digits", [
    (st.diagonal((24,)), [(4, 6)], [(4, 6)]),                                   # elementwise
    (st.make((6, 4), (4, 8), ["i", "k"], ["k", "j"], ["i", "j"]), [(2, 3), (4,)], [(4,), (2, 4)]),  # matmul
    (st.make((12,), (12, 5), ["i"], ["i", "r"], None), [(3, 4)], [(3, 4), (5,)]),  # a reduction
    (st.make((1, 12), (12,), ["o", "i"], ["i"], ["i"], ), [(1,), (2, 6)], [(2, 6)]),
])
def test_refine_is_the_same_jacobian_on_split_axes(s, out_digits, in_digits):
    """Splitting axes into mixed-radix digits changes the layout, not the Jacobian: the
    dense refined Jacobian with its value reshaped is the dense original, reshaped."""
    r = st.refine(s, out_digits, in_digits)
    value = _random_value(s, np.random.default_rng(0))
    dense = st.to_dense(s, value)
    got = st.to_dense(r, None if value is None else value.reshape(r.value_shape))
    np.testing.assert_array_equal(got.reshape(dense.shape), dense)
    assert r.value_size == s.value_size
    with pytest.raises(ValueError, match="split differently"):
        st.refine(st.diagonal((24,)), [(4, 6)], [(6, 4)])


def test_relabel_digits_is_the_reshape():
    """A reshape between shapes with the same digits is the identity on flat indices."""
    r = st.relabel_digits([(4,), (1,), (6,)], [(4, 6)])
    assert r.value_vars is None and r.out_shape == (4, 1, 6) and r.in_shape == (4, 6)
    np.testing.assert_array_equal(st.to_dense(r).reshape(24, 24), np.eye(24))
    with pytest.raises(ValueError, match="do not match"):
        st.relabel_digits([(6,), (4,)], [(4,), (6,)])
