"""Compiled kernel (numba) that finishes a :class:`~budro.transport.NeighborCost`'s lists: per
row, the point itself first at cost 0, then the first m - 1 other points the search found, by
increasing exact squared distance (computed in float64 from the embedding; ties keep the
search's order).  The numpy path in :meth:`NeighborCost._finish` does the same in row blocks, a
gather per coordinate, with the same arithmetic in the same order (bit-identical results); this one
reads each pair's two rows once: at Adult's 36177 rows and m = 100 the whole ``NeighborCost`` takes
about 0.6 s less (``benchmarks/neighbor_choice.py``).  Imported only where numba is installed (``pip install budro[fast]``);
``nogil``: row ranges run in Python threads."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def sq_distances(Z, q, ids, c, out):  # pragma: no cover - compiled
    """``out[t] = sum_d (Z[ids[t], d] - Z[q, d])^2`` for t < c, summed over d in order (the
    value of the one-row loop to the bit), four rows at a time: one row's sum is a chain of
    dependent additions, four independent chains keep the processor busy (Adult's search:
    the candidates' costs 18 -> 11 us of 59 us a query)."""
    p = Z.shape[1]
    t = 0
    while t + 4 <= c:
        i0, i1, i2, i3 = ids[t], ids[t + 1], ids[t + 2], ids[t + 3]
        s0 = s1 = s2 = s3 = 0.0
        for d in range(p):
            zq = Z[q, d]
            a0 = Z[i0, d] - zq
            a1 = Z[i1, d] - zq
            a2 = Z[i2, d] - zq
            a3 = Z[i3, d] - zq
            s0 += a0 * a0
            s1 += a1 * a1
            s2 += a2 * a2
            s3 += a3 * a3
        out[t] = s0
        out[t + 1] = s1
        out[t + 2] = s2
        out[t + 3] = s3
        t += 4
    for x in range(t, c):
        i = ids[x]
        s = 0.0
        for d in range(p):
            a = Z[i, d] - Z[q, d]
            s += a * a
        out[x] = s


@numba.njit(cache=True, nogil=True)
def finish_rows(Z, idx, start, stop, neighbors, costs):  # pragma: no cover - compiled
    k = idx.shape[1]
    m = neighbors.shape[1]
    found = np.empty(max(m - 1, 1), dtype=np.int64)
    cost = np.empty(max(m - 1, 1))
    for j in range(start, stop):
        count = 0
        for t in range(k):
            if count == m - 1:
                break
            i = idx[j, t]
            if i == j:
                continue
            found[count] = i
            count += 1
        sq_distances(Z, j, found, count, cost)
        order = np.argsort(cost[:count], kind="mergesort")  # stable: ties keep the search's order
        neighbors[j, 0] = j
        costs[j, 0] = 0.0
        for t in range(count):
            neighbors[j, 1 + t] = found[order[t]]
            costs[j, 1 + t] = cost[order[t]]


@numba.njit(cache=True, nogil=True)
def expand_copies(idx, members, starts, counts, out):  # pragma: no cover - compiled
    """:func:`budro.transport._expand_copies` (lists over distinct points to lists over rows),
    the same lists: per distinct point r, r's copies and then those of each other listed point
    (-1: none) in list order, each copy's rows in row order, up to m = ``out.shape[1]``; filled
    with r's first row when the list runs out."""
    m = out.shape[1]
    for r in range(out.shape[0]):
        c = 0
        for t in range(-1, idx.shape[1]):
            v = r if t < 0 else idx[r, t]
            if t >= 0 and (v == r or v < 0):
                continue
            for s in range(min(counts[v], m - c)):
                out[r, c] = members[starts[v] + s]
                c += 1
            if c == m:
                break
        for s in range(c, m):
            out[r, s] = members[starts[r]]
