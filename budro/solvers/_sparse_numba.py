"""The numba-compiled kernels of :mod:`budro.solvers._sparse_kernels` (imported only when numba is
installed and the compiled path is used; module-level functions, so that ``cache=True`` reuses the
compiled code across processes)."""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _hull_pass(rc, rr, alive, h, tau, idx):
    """Drop, all at once, the alive interior runs more than tau below the chord between
    their alive neighbours (``idx`` is scratch); returns how many were dropped."""
    k = 0
    for t in range(h):
        if alive[t]:
            idx[k] = t
            k += 1
    dropped = 0
    for q in range(1, k - 1):
        a, b, c = idx[q - 1], idx[q], idx[q + 1]
        dC1 = rc[b] - rc[a]
        dC2 = rc[c] - rc[a]
        dR1 = rr[b] - rr[a]
        dR2 = rr[c] - rr[a]
        # R_b < R_a + dR2 * dC1 / dC2 - tau, multiplied by dC2 > 0 (as the numpy path)
        if dR1 * dC2 < dR2 * dC1 - tau * dC2:
            alive[b] = False
            dropped += 1
    return dropped

@numba.njit(cache=True, nogil=True)
def _columns(j0, j1, rows, C, flat, losses_flat, tau, out_rows, out_cols, out_R, out_C, edge_e, edge_dc,
             last_cost):
    """Columns j0 <= j < j1; their pairs go to the outputs from j0 * m, their edges from
    j0 * (m - 1).  Returns (pairs written, pairs kept by dominance, edges written)."""
    m = rows.shape[1]
    Rl = np.empty(m)
    keep = np.empty(m, dtype=np.bool_)
    rc = np.empty(m)  # run costs
    rr = np.empty(m)  # run values (largest loss of the run)
    rfirst = np.empty(m, dtype=np.int64)  # first list position of each run
    rlast = np.empty(m, dtype=np.int64)
    alive = np.empty(m, dtype=np.bool_)
    exact = np.empty(m, dtype=np.bool_)
    idx = np.empty(m, dtype=np.int64)
    n_out = j0 * m
    n_dom = 0
    n_edge = j0 * (m - 1)
    for j in range(j0, j1):
        # 1. dominance, in increasing cost
        best = -np.inf
        for r in range(m):
            v = losses_flat[flat[j, r]]
            Rl[r] = v
            keep[r] = r == 0 or v + tau >= best
            if v > best:
                best = v
        # 2. runs of equal cost among the kept positions
        h = 0
        for r in range(m):
            if not keep[r]:
                continue
            n_dom += 1
            if h > 0 and C[j, r] == rc[h - 1]:
                rlast[h - 1] = r
                if Rl[r] > rr[h - 1]:
                    rr[h - 1] = Rl[r]
            else:
                rc[h] = C[j, r]
                rr[h] = Rl[r]
                rfirst[h] = r
                rlast[h] = r
                h += 1
        # 3. the tau-hull over runs
        for t in range(h):
            alive[t] = True
        while h >= 3 and _hull_pass(rc, rr, alive, h, tau, idx) > 0:
            pass
        for t in range(h):
            if not alive[t]:
                continue
            top = rr[t] - tau
            for r in range(rfirst[t], rlast[t] + 1):
                if keep[r] and Rl[r] >= top:
                    out_rows[n_out] = rows[j, r]
                    out_cols[n_out] = j
                    out_R[n_out] = Rl[r]
                    out_C[n_out] = C[j, r]
                    n_out += 1
        # 4. the exact hull (tau = 0) over the alive runs, and its edges
        for t in range(h):
            exact[t] = alive[t]
        while h >= 3 and _hull_pass(rc, rr, exact, h, 0.0, idx) > 0:
            pass
        prev = -1
        for t in range(h):
            if not exact[t]:
                continue
            if prev >= 0:
                dc = rc[t] - rc[prev]
                if dc > 0.0:
                    e = (rr[t] - rr[prev]) / dc
                    edge_e[n_edge] = e if e > 0.0 else 0.0
                    edge_dc[n_edge] = dc
                    n_edge += 1
            prev = t
        last_cost[j] = rc[prev]
    return n_out - j0 * m, n_dom, n_edge - j0 * (m - 1)

@numba.njit(cache=True, parallel=True)
def candidates(bounds, rows, C, flat, losses_flat, tau, out_rows, out_cols, out_R, out_C, edge_e, edge_dc,
               last_cost, counts):
    """The columns in chunks ``bounds[c] <= j < bounds[c + 1]``, one chunk per task."""
    for c in numba.prange(bounds.size - 1):
        a, b, d = _columns(bounds[c], bounds[c + 1], rows, C, flat, losses_flat, tau, out_rows, out_cols,
                           out_R, out_C, edge_e, edge_dc, last_cost)
        counts[c, 0] = a
        counts[c, 1] = b
        counts[c, 2] = d

@numba.njit(cache=True, nogil=True)
def _bucket(x, lo, width, n_buckets):
    """Bucket of x in [lo, lo + n_buckets * width), clamped (rounding, overflow to inf)."""
    q = (x - lo) / width
    if not q > 0.0:
        return 0
    if q >= n_buckets:
        return n_buckets - 1
    return int(q)

@numba.njit(cache=True, nogil=True)
def select(e, dc, need, n_buckets):
    """min{t in e : sum(dc[e <= t]) >= need}, or max(e) if the total falls short.

    Buckets by value, keeps the bucket where the running sum crosses ``need``, and repeats
    inside it (the values are far from uniform) until few are left, which are sorted."""
    top = 0.0
    for i in range(e.size):
        if e[i] > top:
            top = e[i]
    lo, hi = 0.0, top
    acc = 0.0  # sum of dc over values below the current range
    ee, dd = e, dc
    sums = np.empty(n_buckets)
    rounds = 0
    while ee.size > 64 and hi > lo and rounds < 40:
        width = (hi - lo) / n_buckets
        if not width > 0.0:
            break
        sums[:] = 0.0
        for i in range(ee.size):
            b = _bucket(ee[i], lo, width, n_buckets)
            sums[b] += dd[i]
        bucket = -1
        for b in range(n_buckets):
            if acc + sums[b] >= need:
                bucket = b
                break
            acc += sums[b]
        if bucket < 0:
            return top
        cnt = 0
        bmin, bmax = np.inf, -np.inf
        for i in range(ee.size):
            if _bucket(ee[i], lo, width, n_buckets) == bucket:
                cnt += 1
                bmin = min(bmin, ee[i])
                bmax = max(bmax, ee[i])
        if bmin == bmax:
            return bmin  # the sum crosses need on values that are all equal
        rounds += 1
        if cnt < ee.size:  # keep that bucket's values (else all are in it: just narrow)
            e2 = np.empty(cnt)
            d2 = np.empty(cnt)
            k = 0
            for i in range(ee.size):
                if _bucket(ee[i], lo, width, n_buckets) == bucket:
                    e2[k] = ee[i]
                    d2[k] = dd[i]
                    k += 1
            ee, dd = e2, d2
        lo, hi = bmin, bmax
    order = np.argsort(ee, kind="mergesort")
    for q in range(ee.size):
        acc += dd[order[q]]
        if acc >= need:
            return ee[order[q]]
    return top
