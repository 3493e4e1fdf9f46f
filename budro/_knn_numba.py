"""Compiled kernel (numba) of the exact brute-force neighbour search of
:class:`~budro.transport.NeighborCost` (:func:`budro.transport._brute_force_neighbors`).

The caller computes a block of dot products of the centred points in float32 (a BLAS GEMM, twice
the speed of float64), ``D[r, j] ~ <zc_q, zc_j>`` for the query rows ``q = start + r``.  Per query
row this kernel

1. ranks every point by ``key_j = |zc_j|^2 - 2 D[r, j]`` (float64 from the float32 products) and
   keeps the m smallest keys in a max-heap;
2. takes as candidates every point whose key is at most the heap's largest plus twice ``err``,
   where ``err = kappa (|zc_q|^2 + max_j |zc_j|^2)`` bounds ``|key_j + |zc_q|^2 - C_qj|`` for the
   exact cost ``C_qj`` (the float64 sum of squared coordinate differences of the given points, as
   :meth:`NeighborCost._finish` computes it): every other point costs more than each of the m heap
   points, so it cannot be among the m nearest;
3. computes the candidates' exact costs and keeps the m smallest, ties by row order.

So the lists are the exact m nearest points under the exact costs (ties at the m-th cost broken
by row order), whatever the float32 products rounded.  Imported only where numba is installed
(``pip install budro[fast]``); ``nogil``: row ranges run in Python threads."""

from __future__ import annotations

import numba
import numpy as np

from budro._lists_numba import sq_distances


@numba.njit(cache=True, nogil=True, inline="always")
def _sift_down(key, idx, m, pos):
    """Restore the max-heap property of ``key[:m]`` (with ``idx``) below position ``pos``."""
    k0 = key[pos]
    i0 = idx[pos]
    while True:
        child = 2 * pos + 1
        if child >= m:
            break
        if child + 1 < m and key[child + 1] > key[child]:
            child += 1
        if key[child] <= k0:
            break
        key[pos] = key[child]
        idx[pos] = idx[child]
        pos = child
    key[pos] = k0
    idx[pos] = i0


@numba.njit(cache=True, nogil=True)
def _heap_smallest(D, r, sqc, step, k, hkey, hidx):
    """The k smallest keys ``sqc[j] - 2 D[r, j]`` over ``j = 0, step, 2 step, ...`` (at least k
    of them) in a max-heap ``hkey[:k]`` / ``hidx[:k]``; returns the largest of them (the root)."""
    n = D.shape[1]
    for t in range(k):
        j = t * step
        hkey[t] = sqc[j] - 2.0 * D[r, j]
        hidx[t] = j
    for s in range(k // 2 - 1, -1, -1):  # heapify: sift each inner node down
        _sift_down(hkey, hidx, k, s)
    top = hkey[0]
    for j in range(k * step, n, step):
        key = sqc[j] - 2.0 * D[r, j]
        if key < top:
            hkey[0] = key
            hidx[0] = j
            _sift_down(hkey, hidx, k, 0)
            top = hkey[0]
    return top


#: The threshold of a row's search: the SAMPLE_EXTRA + 2 m / SAMPLE_STEP smallest key over every
#: SAMPLE_STEP-th point (about 2 m + SAMPLE_EXTRA SAMPLE_STEP points of all lie below it).
SAMPLE_STEP = 16
SAMPLE_EXTRA = 8


@numba.njit(cache=True, nogil=True)
def select_rows(D, r0, r1, start, Z, sqc, kappa, sqc_max, out):  # pragma: no cover - compiled
    """Query rows ``start + r`` for ``r0 <= r < r1`` (dot products in ``D[r]``): their m nearest
    points, by exact cost and then row order, in ``out[start + r]`` (m = ``out.shape[1]``).

    Per row, a threshold T from every SAMPLE_STEP-th point's key (so that, almost always, at
    least m keys of all lie at or below it), then one pass collecting the keys up to ``T + 2
    err``: when at least m of them are at most T, the m-th smallest key of all is among them, and
    so is every candidate.  Otherwise (rare) the m smallest keys of all by a heap."""
    n = D.shape[1]
    m = out.shape[1]
    ks = min(m * 2 // SAMPLE_STEP + SAMPLE_EXTRA, (n + SAMPLE_STEP - 1) // SAMPLE_STEP)
    sampled = n >= 4 * SAMPLE_STEP * ks and ks > 0
    hkey = np.empty(max(m, ks))
    hidx = np.empty(max(m, ks), dtype=np.int64)
    cand = np.empty(n, dtype=np.int64)
    ckey = np.empty(n)
    exact = np.empty(n)
    for r in range(r0, r1):
        q = start + r
        err = kappa * (sqc[q] + sqc_max)
        c = 0
        below = 0
        if sampled:
            T = _heap_smallest(D, r, sqc, SAMPLE_STEP, ks, hkey, hidx)
            limit = T + 2.0 * err
            for j in range(n):
                key = sqc[j] - 2.0 * D[r, j]
                if key <= limit:
                    ckey[c] = key
                    cand[c] = j
                    c += 1
                    below += key <= T
        if below >= m:
            # the m-th smallest key of all is among the collected ones: find it by a heap on them
            for t in range(m):
                hkey[t] = ckey[t]
                hidx[t] = t
            for s in range(m // 2 - 1, -1, -1):
                _sift_down(hkey, hidx, m, s)
            top = hkey[0]
            for t in range(m, c):
                if ckey[t] < top:
                    hkey[0] = ckey[t]
                    hidx[0] = t
                    _sift_down(hkey, hidx, m, 0)
                    top = hkey[0]
            bound = top + 2.0 * err  # <= limit: every candidate was collected
            kept = 0
            for t in range(c):
                if ckey[t] <= bound:
                    cand[kept] = cand[t]
                    kept += 1
            c = kept
        else:
            # the m smallest keys of all (a max-heap: its root is the largest kept)
            top = _heap_smallest(D, r, sqc, 1, m, hkey, hidx)
            # candidates: every point whose key may hide a cost within the heap's
            bound = top + 2.0 * err
            c = 0
            for j in range(n):
                if sqc[j] - 2.0 * D[r, j] <= bound:
                    cand[c] = j
                    c += 1
        if c < m:  # cannot happen: the m smallest keys pass the test
            raise RuntimeError("budro._knn_numba: fewer candidates than neighbours")
        # exact costs, the m smallest (stable: ties by row order)
        sq_distances(Z, q, cand, c, exact)
        order = np.argsort(exact[:c], kind="mergesort")
        for t in range(m):
            out[q, t] = cand[order[t]]


# --- The symmetric search: each pair's product computed once ------------------------------
#
# The row-block search above computes every pair's product twice (once for each of its two
# points).  The symmetric search computes it once, in tiles of the upper triangle: a tile's
# pair (i, j) is tested against row i's threshold and, off the diagonal, against row j's, and
# either row collects the other point with its key in float32 (the candidates of all rows are
# kept until the tiles are done, at most ``cap`` a row).  Per row, as above, a threshold T from
# every SAMPLE_STEP-th point (:func:`sample_thresholds`), the keys up to ``T + 2 err`` collected,
# and when at least m of them are at most T (and none was dropped for ``cap``) the m nearest
# are among them (:func:`finish_candidates`); the other rows are searched again by
# :func:`select_rows`.


@numba.njit(cache=True, nogil=True)
def sample_thresholds(D, r0, r1, start, sqs, ks, T):  # pragma: no cover - compiled
    """``T[start + r]`` = the ks-th smallest key ``sqs[s] - 2 D[r, s]`` of row r over the
    sampled points s (the columns of D), for ``r0 <= r < r1``."""
    hkey = np.empty(ks)
    hidx = np.empty(ks, dtype=np.int64)
    for r in range(r0, r1):
        T[start + r] = _heap_smallest(D, r, sqs, 1, ks, hkey, hidx)


@numba.njit(cache=True, nogil=True)
def collect_pairs(D, i0, j0, sqc, low, lim, cand, ckey, count, below, both):  # pragma: no cover - compiled
    """The pairs ``(i0 + a, j0 + b)`` of a tile of products ``D[a, b]``: row ``i = i0 + a``
    collects point j when its key ``sqc[j] - 2 D[a, b] <= lim[i]`` and, when ``both`` (a tile
    off the diagonal), row j collects point i when ``sqc[i] - 2 D[a, b] <= lim[j]``.  A row's
    ``count`` goes on past ``cap = cand.shape[1]`` (the row is then searched again);
    ``below`` counts its collected keys at most ``low``."""
    cap = cand.shape[1]
    A, B = D.shape
    for a in range(A):
        i = i0 + a
        si = sqc[i]
        li = lim[i]
        ti = low[i]
        ci = count[i]
        bi = below[i]
        for b in range(B):
            j = j0 + b
            d2 = 2.0 * D[a, b]
            key = sqc[j] - d2
            if key <= li:
                if ci < cap:
                    cand[i, ci] = j
                    ckey[i, ci] = key
                ci += 1
                bi += key <= ti
            if both:
                key = si - d2
                if key <= lim[j]:
                    cj = count[j]
                    if cj < cap:
                        cand[j, cj] = i
                        ckey[j, cj] = key
                    count[j] = cj + 1
                    below[j] += key <= low[j]
        count[i] = ci
        below[i] = bi


@numba.njit(cache=True, nogil=True)
def finish_candidates(q0, q1, Z, cand, ckey, count, below, band, out, redo):  # pragma: no cover - compiled
    """Rows ``q0 <= q < q1``: their m nearest points (m = ``out.shape[1]``) by exact cost and then
    row order from their collected candidates, in ``out[q]``; ``redo[q] = True`` where the
    candidates may miss some (fewer than m keys at most the row's threshold, or more than
    ``cap`` collected).  ``band[q]`` = twice the bound on a stored key's error (the products'
    rounding and the float32 key's): every point at most as far as the m-th nearest has a stored
    key within ``band`` of the m-th smallest stored key."""
    cap = cand.shape[1]
    m = out.shape[1]
    hkey = np.empty(m)
    hidx = np.empty(m, dtype=np.int64)
    keep = np.empty(cap, dtype=np.int64)
    exact = np.empty(cap)
    for q in range(q0, q1):
        c = count[q]
        if c > cap or below[q] < m:
            redo[q] = True
            continue
        for t in range(m):
            hkey[t] = ckey[q, t]
            hidx[t] = t
        for s in range(m // 2 - 1, -1, -1):
            _sift_down(hkey, hidx, m, s)
        top = hkey[0]
        for t in range(m, c):
            if ckey[q, t] < top:
                hkey[0] = ckey[q, t]
                hidx[0] = t
                _sift_down(hkey, hidx, m, 0)
                top = hkey[0]
        bound = top + band[q]
        kept = 0
        for t in range(c):
            if ckey[q, t] <= bound:
                keep[kept] = cand[q, t]
                kept += 1
        ids = np.sort(keep[:kept])  # row order, for the ties
        sq_distances(Z, q, ids, kept, exact)
        order = np.argsort(exact[:kept], kind="mergesort")
        for t in range(m):
            out[q, t] = ids[order[t]]
