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
