"""The numba-compiled kernels of :mod:`budro.solvers._sparse_kernels` (imported only when numba is
installed and the compiled path is used; module-level functions, so that ``cache=True`` reuses the
compiled code across processes)."""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _below(ca, ra, cb, rb, cc, rc, tau):
    """Whether (cb, rb) lies more than tau below the chord from (ca, ra) to (cc, rc), ca < cb < cc:
    then ``R_b - eta C_b < max(R_a - eta C_a, R_c - eta C_c) - tau`` at every eta >= 0."""
    # R_b < R_a + dR2 * dC1 / dC2 - tau, multiplied by dC2 > 0 (as the numpy path)
    dC1 = cb - ca
    dC2 = cc - ca
    return (rb - ra) * dC2 < (rc - ra) * dC1 - tau * dC2


@numba.njit(cache=True, nogil=True, inline="always")
def _put(out_rows, out_cols, out_R, out_C, at, j, r, value, flat, C, label, shift, K):
    """Write list entry r of column j (loss ``value``) as candidate pair ``at``: its row is
    ``(flat[r] - label) / K``, by a shift where K is a power of two (``shift`` >= 0)."""
    x = flat[r] - label
    out_rows[at] = x >> shift if shift >= 0 else x // K
    out_cols[at] = j
    out_R[at] = value
    out_C[at] = C[r]


@numba.njit(cache=True, nogil=True)
def _columns(j0, j1, K, labels, lo, hi, C, flat, losses_flat, tau, weights, out_rows, out_cols, out_R, out_C, edge_e,
             edge_dc, last_cost, col_count, edge_count, out0, edge0, width, floor, scale, ceiling):
    """Columns j0 <= j < j1; their pairs go to the outputs from ``out0``, their edges from
    ``edge0``.  Returns (pairs written, pairs kept by dominance, edges written).

    Column j's list is ``flat[lo[j]:hi[j]]`` / ``C[lo[j]:hi[j]]`` (one-dimensional, lists of any
    lengths up to ``width`` anywhere in the arrays: equal-length lists have ``lo[j] = j m``, the
    full path's lists lie in a pool with room between them).
    The row of list entry r of column j is ``(flat[r] - labels[j]) // K`` (no separate
    array of rows to stream through: memory traffic is what this kernel spends its time on).
    One pass over each list: dominance (branch-free: every entry is written, the count only
    advances for kept ones); runs of equal cost among the kept entries (each at its largest
    loss); the tau-hull of the runs with a stack (a run is popped when it lies more than tau below
    the chord between the run under it and the next run: two points of the column certify that
    it never comes within tau of the column's maximum); then the exact hull (tau = 0) of what is
    left, whose edges' cost drops are weighted by ``weights[j]`` (the column's multiplicity).

    ``floor`` > 0: the output is exact for eta >= floor only (a solve whose eta* is known to lie
    there): dominance compares the values at floor, ``R_r - floor C_r``, instead of the losses
    (an entry more than tau below a cheaper one at floor stays so at every larger eta, the cheaper
    one's value falling more slowly), which keeps far fewer entries when the losses rise along
    the lists; the comparison's margin adds the rounding of those values (``scale`` >= every
    |loss|).  The hulls and edges below floor are then those of the kept entries only.

    ``ceiling`` < inf: exact for eta <= ceiling only as well (a solve whose eta* is known to lie in
    [floor, ceiling]): of the entries dominance keeps, one more than tau below a more expensive
    one at the ceiling is dropped too (it stays so at every smaller eta, the dearer one's value
    rising faster as eta falls), with the same margin for rounding.  At Adult's windows (a few
    per cent wide) this leaves one pair in about three columns of four against four pairs a
    column at the floor alone; the hulls and edges above the ceiling are then those of the kept
    entries only."""
    m = max(width, 1)
    kpos = np.empty(m, dtype=np.int64)  # kept list entries (indices into flat and C), in cost order
    kval = np.empty(m)
    rc = np.empty(m)  # run costs
    rr = np.empty(m)  # run values (largest loss of the run)
    rfirst = np.empty(m, dtype=np.int64)  # first kept entry of each run
    st = np.empty(m, dtype=np.int64)  # tau-hull stack (run indices)
    ex = np.empty(m, dtype=np.int64)  # exact-hull stack
    n_out = out0
    n_dom = 0
    n_edge = edge0
    # K a power of two (K = 2 for two labels): a candidate's row by a shift instead of a 64-bit
    # integer division (5-6 % of the kernel's time at 10^6 points, m = 16); flat - label =
    # row * K >= 0, so both give the same row
    shift = -1
    if K & (K - 1) == 0:
        shift = 0
        while (1 << shift) < K:
            shift += 1
    for j in range(j0, j1):
        # 1. dominance in increasing cost: keep r iff R_r + tau >= max(R_0 .. R_{r-1}) (the first
        #    entry always; lists are never empty)
        p0 = lo[j]
        v = losses_flat[np.uint64(flat[np.uint64(p0)])]
        kpos[0] = p0
        kval[0] = v
        nk = 1
        if floor > 0.0:
            # 1'. dominance at eta >= floor: keep r iff w_r + margin >= max(w_0 .. w_{r-1}), w =
            #     R - floor C; the margin adds 2^-50 (scale + floor C_max) to tau, more than the
            #     rounding of two such values (each within 2^-53 (|R| + 2 floor C) of its own)
            slack = tau + 2.0**-50 * (scale + floor * C[np.uint64(hi[j] - 1)])
            best = v - floor * C[np.uint64(p0)]
            for r in range(p0 + 1, hi[j]):
                v = losses_flat[np.uint64(flat[np.uint64(r)])]
                w = v - floor * C[np.uint64(r)]
                kpos[nk] = r
                kval[nk] = v
                nk += w + slack >= best
                best = max(best, w)
        else:
            best = v
            for r in range(p0 + 1, hi[j]):
                # unsigned indices: no negative-index wraparound on the hot loads (5-10 % at Adult)
                v = losses_flat[np.uint64(flat[np.uint64(r)])]
                kpos[nk] = r
                kval[nk] = v
                nk += v + tau >= best
                best = max(best, v)
        k0 = 0
        if ceiling < np.inf and nk > 1:
            # 1''. dominance at eta <= ceiling, from the dear end: keep k iff u_k + margin >=
            #      max(u_{k+1} .. u_{nk-1}), u = R - ceiling C; the kept entries are written down
            #      from the end (dst >= k: nothing unread is overwritten) and start at k0
            slack_c = tau + 2.0**-50 * (scale + ceiling * C[np.uint64(hi[j] - 1)])
            best_c = -np.inf
            dst = nk - 1
            for k in range(nk - 1, -1, -1):
                u = kval[k] - ceiling * C[np.uint64(kpos[k])]
                kpos[dst] = kpos[k]
                kval[dst] = kval[k]
                dst -= u + slack_c >= best_c
                best_c = max(best_c, u)
            k0 = dst + 1
        n_dom += nk - k0
        if nk - k0 == 1:
            # one entry kept (most columns inside a window): it is the column's hull, no edges
            r = kpos[k0]
            _put(out_rows, out_cols, out_R, out_C, n_out, j, r, kval[k0], flat, C, labels[j], shift, K)
            n_out += 1
            col_count[j] = 1
            last_cost[j] = C[r]
            edge_count[j] = 0
            continue
        # 2. runs of equal cost among the kept positions
        h = 0
        for k in range(k0, nk):
            c = C[np.uint64(kpos[k])]
            v = kval[k]
            if h > 0 and c == rc[h - 1]:
                if v > rr[h - 1]:
                    rr[h - 1] = v
            else:
                rc[h] = c
                rr[h] = v
                rfirst[h] = k
                h += 1
        # 3. the tau-hull over runs (first and last run always kept)
        first = n_out
        s = 0
        for t in range(h):
            while s >= 2 and _below(rc[st[s - 2]], rr[st[s - 2]], rc[st[s - 1]], rr[st[s - 1]], rc[t], rr[t], tau):
                s -= 1
            st[s] = t
            s += 1
        label = labels[j]
        for q in range(s):
            t = st[q]
            top = rr[t] - tau
            stop = rfirst[t + 1] if t + 1 < h else nk
            for k in range(rfirst[t], stop):
                if kval[k] >= top:
                    _put(out_rows, out_cols, out_R, out_C, n_out, j, kpos[k], kval[k], flat, C, label, shift, K)
                    n_out += 1
        col_count[j] = n_out - first
        # 4. the exact hull (tau = 0) of the tau-hull's runs, and its edges
        e_n = 0
        for q in range(s):
            t = st[q]
            while e_n >= 2 and _below(rc[ex[e_n - 2]], rr[ex[e_n - 2]], rc[ex[e_n - 1]], rr[ex[e_n - 1]], rc[t], rr[t], 0.0):
                e_n -= 1
            ex[e_n] = t
            e_n += 1
        w = weights[j]
        edges_before = n_edge
        for q in range(1, e_n):
            a, b = ex[q - 1], ex[q]
            dc = rc[b] - rc[a]
            if dc > 0.0:
                e = (rr[b] - rr[a]) / dc
                edge_e[n_edge] = e if e > 0.0 else 0.0
                edge_dc[n_edge] = dc * w
                n_edge += 1
        last_cost[j] = rc[ex[e_n - 1]]
        edge_count[j] = n_edge - edges_before
    return n_out - out0, n_dom, n_edge - edge0


@numba.njit(cache=True, nogil=True)
def candidates_serial(K, labels, lo, hi, C, flat, losses_flat, tau, weights, out_rows, out_cols, out_R, out_C, edge_e,
                      edge_dc, last_cost, col_count, edge_count, width, floor, scale, ceiling):
    """All columns on the calling thread, written contiguously from the start of the outputs."""
    return _columns(0, lo.size, K, labels, lo, hi, C, flat, losses_flat, tau, weights, out_rows, out_cols, out_R,
                    out_C, edge_e, edge_dc, last_cost, col_count, edge_count, 0, 0, width, floor, scale, ceiling)


@numba.njit(cache=True, parallel=True)
def candidates(bounds, at, K, labels, lo, hi, C, flat, losses_flat, tau, weights, out_rows, out_cols, out_R, out_C,
               edge_e, edge_dc, last_cost, col_count, edge_count, width, floor, scale, ceiling, counts):
    """The columns in chunks ``bounds[c] <= j < bounds[c + 1]``, one chunk per task; chunk c
    writes its pairs from ``at[c]`` (the lists' entries before its first column) and its edges
    from ``at[c] - bounds[c]`` (a list of length l has at most l - 1 edges)."""
    for c in numba.prange(bounds.size - 1):
        j0 = bounds[c]
        a, b, d = _columns(j0, bounds[c + 1], K, labels, lo, hi, C, flat, losses_flat, tau, weights, out_rows,
                           out_cols, out_R, out_C, edge_e, edge_dc, last_cost, col_count, edge_count, at[c],
                           at[c] - j0, width, floor, scale, ceiling)
        counts[c, 0] = a
        counts[c, 1] = b
        counts[c, 2] = d


@numba.njit(cache=True, nogil=True)
def prune(ptr, C, flat, losses_flat, labels, margin, out_ptr, out_C, out_flat):
    """Keep, in each column's list, every entry r with ``max(R before r) - R_r <= margin[labels[j]]``
    (the first entry always): the lists of a warm start (:mod:`budro.solvers._dual_sparse`).
    Every dropped entry lies more than its column's margin below an earlier one.  Returns the
    number of entries kept, the longest pruned list, and how many entries half the margins would
    keep.  One branch-free pass over the losses as the candidate kernel's dominance step (the
    costs are read for the kept entries only: memory traffic is what the pass spends its time on)."""
    n = ptr.size - 1
    longest = 0
    for j in range(n):
        longest = max(longest, ptr[j + 1] - ptr[j])
    kpos = np.empty(max(longest, 1), dtype=np.int64)
    kgap = np.empty(max(longest, 1))
    nk = 0
    width = 0
    half = 0
    out_ptr[0] = 0
    for j in range(n):
        mg = margin[labels[j]]
        best = -np.inf
        k = 0
        for r in range(ptr[j], ptr[j + 1]):
            v = losses_flat[np.uint64(flat[np.uint64(r)])]  # unsigned: no wraparound fix-ups
            gap = best - v  # -inf at the first entry: kept
            kpos[k] = r
            kgap[k] = gap
            k += gap <= mg
            best = max(best, v)
        for q in range(k):
            out_C[nk + q] = C[kpos[q]]
            out_flat[nk + q] = flat[kpos[q]]
            half += kgap[q] <= 0.5 * mg
        nk += k
        width = max(width, k)
        out_ptr[j + 1] = nk
    return nk, width, half


@numba.njit(cache=True, parallel=True)
def gather_rows(src, idx, out):
    """``out[p] = src[idx[p]]`` for (n, K) arrays, the rows on the kernel threads (a gather at
    random places waits on memory: two threads take about half the time of one)."""
    K = out.shape[1]
    for p in numba.prange(out.shape[0]):
        i = idx[p]
        for k in range(K):
            out[p, k] = src[i, k]


@numba.njit(cache=True, nogil=True)
def abs_max(x):
    """``max |x|`` (0 for an empty array): ``np.abs(x).max()`` without its temporary."""
    top = 0.0
    for i in range(x.size):
        v = abs(x[i])
        if v > top:
            top = v
    return top


@numba.njit(cache=True, nogil=True)
def label_drift(x, ref, K, out):
    """``out[k] = max_i |x[i K + k] - ref[i K + k]|`` for flattened (n, K) losses: the largest
    change of each label's losses, in one pass without temporaries."""
    for k in range(K):
        top = 0.0
        for i in range(k, x.size, K):
            v = abs(x[i] - ref[i])
            if v > top:
                top = v
        out[k] = top


@numba.njit(cache=True, nogil=True)
def _bucket(x, lo, inv_width, n_buckets):
    """Bucket of x in [lo, lo + n_buckets / inv_width), clamped (rounding, overflow to inf)."""
    q = (x - lo) * inv_width
    if not q > 0.0:
        return 0
    if q >= n_buckets:
        return n_buckets - 1
    return int(q)


@numba.njit(cache=True, nogil=True, inline="always")
def _crossing(values, weights, acc, need):
    """Where ``acc`` plus the weights taken in increasing order of the values (equal values in
    the given order) first reaches ``need``: ``(True, that value)``, else ``(False, 0.0)``."""
    order = np.argsort(values, kind="mergesort")
    for q in range(values.size):
        acc += weights[order[q]]
        if acc >= need:
            return True, values[order[q]]
    return False, 0.0


@numba.njit(cache=True, nogil=True)
def select(e, dc, need, n_buckets):
    """min{t in e : sum(dc[e <= t]) >= need}, or max(e) if the total falls short.

    Buckets by value, keeps the bucket where the running sum crosses ``need``, and repeats
    inside it (the values are far from uniform) until few are left, which are sorted.  The
    bucket function is monotone in the value, so the sums below a bucket are exact prefixes."""
    top = 0.0
    for i in range(e.size):
        if e[i] > top:
            top = e[i]
    lo, hi = 0.0, top
    acc = 0.0  # sum of dc over values below the current range
    ee, dd = e, dc
    sums = np.empty(n_buckets)
    which = np.empty(e.size, dtype=np.int64)
    rounds = 0
    while ee.size > 64 and hi > lo and rounds < 40:
        inv_width = n_buckets / (hi - lo)
        if not (inv_width < np.inf):
            break
        sums[:] = 0.0
        for i in range(ee.size):
            b = _bucket(ee[i], lo, inv_width, n_buckets)
            which[i] = b
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
            if which[i] == bucket:
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
                if which[i] == bucket:
                    e2[k] = ee[i]
                    d2[k] = dd[i]
                    k += 1
            ee, dd = e2, d2
        lo, hi = bmin, bmax
    found, t = _crossing(ee, dd, acc, need)
    return t if found else top


@numba.njit(cache=True, nogil=True)
def select_windows(e, dc, need, lows, highs, buf_e, buf_d, codes):
    """:func:`select` when its answer lies in one of the windows ``[lows[w], highs[w]]``, in one
    pass: for each window the weights below it are summed and its values (at most
    ``buf_e.shape[1]``, in row w of the buffers) kept, then sorted and summed on until ``need`` is
    reached.  Returns the first window's answer that it holds, else -1.0; ``codes[w]`` is window
    w's own answer, or -1.0 when the answer is not in it, -2.0 when it held more values than its
    buffer (a narrower window may hold it).  An empty window (``lo > hi``) holds nothing."""
    W, cap = buf_e.shape
    below = np.zeros(W)
    k = np.zeros(W, dtype=np.int64)
    for i in range(e.size):
        x = e[i]
        for w in range(W):
            if x < lows[w]:
                below[w] += dc[i]
            elif x <= highs[w]:
                if k[w] < cap:
                    buf_e[w, k[w]] = x
                    buf_d[w, k[w]] = dc[i]
                k[w] += 1
    answer = -1.0
    for w in range(W):
        codes[w] = -1.0
        if below[w] >= need:
            continue
        if k[w] > cap:
            codes[w] = -2.0
            continue
        found, t = _crossing(buf_e[w, :k[w]], buf_d[w, :k[w]], below[w], need)
        if found:
            codes[w] = t
        if answer < 0.0 and codes[w] >= 0.0:
            answer = codes[w]
    return answer


@numba.njit(cache=True, nogil=True)
def group_top(losses, order, starts, top, rep):
    """Per group of rows (``order[starts[u]:starts[u + 1]]``, increasing row index) and label: the
    largest loss and the smallest row attaining it (:meth:`budro.solvers._dual_lists.Reduction.reduce`)."""
    U = starts.size
    K = losses.shape[1]
    n = order.size
    for u in range(U):
        a = starts[u]
        b = starts[u + 1] if u + 1 < U else n
        for k in range(K):
            best = losses[order[a], k]
            arg = order[a]
            for q in range(a + 1, b):
                v = losses[order[q], k]
                if v > best:
                    best = v
                    arg = order[q]
            top[u, k] = best
            rep[u, k] = arg


@numba.njit(cache=True, nogil=True, inline="always")
def _evaluate_columns(j0, j1, starts, rows, R, C, eta, tie_rtol, scale, weights, lo, hi, c_lo, c_hi, terms):
    """Columns j0 <= j < j1 of :func:`evaluate`: each column's term ``weights[j] * max`` and its
    argmax extremes."""
    n = starts.size
    size = rows.size
    for j in range(j0, j1):
        a = starts[j]
        b = starts[j + 1] if j + 1 < n else size
        vmax = -np.inf
        for k in range(a, b):
            v = R[k] - C[k] * eta
            if v > vmax:
                vmax = v
        terms[j] = weights[j] * vmax
        floor = vmax - tie_rtol * (scale + abs(vmax))
        clo, chi = np.inf, -np.inf
        rlo, rhi = -1, -1
        for k in range(a, b):
            if R[k] - C[k] * eta >= floor:
                c = C[k]
                i = rows[k]
                if c < clo or (c == clo and i < rlo):
                    clo, rlo = c, i
                if c > chi or (c == chi and i < rhi):
                    chi, rhi = c, i
        lo[j], hi[j], c_lo[j], c_hi[j] = rlo, rhi, clo, chi


@numba.njit(cache=True, nogil=True)
def evaluate(starts, rows, R, C, eta, tie_rtol, scale, weights, lo, hi, c_lo, c_hi, terms):
    """g's column terms at eta on candidate pairs grouped by column (``starts``; every column
    non-empty): the sum of the column maxima times the columns' ``weights``, and each column's cheapest / most expensive
    argmax row (ties within ``tie_rtol * (scale + |max|)``, equal costs to the smallest row),
    with the same arithmetic per pair as the numpy path.  ``terms``: room for the columns' terms,
    summed in column order."""
    _evaluate_columns(0, starts.size, starts, rows, R, C, eta, tie_rtol, scale, weights, lo, hi, c_lo, c_hi, terms)
    total = 0.0
    for j in range(starts.size):
        total += terms[j]
    return total


@numba.njit(cache=True, parallel=True)
def evaluate_parallel(bounds, starts, rows, R, C, eta, tie_rtol, scale, weights, lo, hi, c_lo, c_hi, terms):
    """:func:`evaluate` with the columns in chunks ``bounds[c] <= j < bounds[c + 1]``, one chunk per
    task; the terms are then summed in column order, as on one thread: the same value to the bit."""
    for c in numba.prange(bounds.size - 1):
        _evaluate_columns(bounds[c], bounds[c + 1], starts, rows, R, C, eta, tie_rtol, scale, weights, lo, hi, c_lo,
                          c_hi, terms)
    total = 0.0
    for j in range(starts.size):
        total += terms[j]
    return total


@numba.njit(cache=True, nogil=True)
def switch_plan(rows_cheap, rows_dear, cost_cheap, cost_dear, deficit, switch, labels, losses, out_rows, prod_loss,
                prod_cost, weights, split_vals):
    """The exact recovery of ``budro.solvers._dual_plan._switch_entries`` and the weights of
    ``_result_from_entries`` in one pass, with the same arithmetic in the same order (the
    budget's running sum is numpy's sequential ``cumsum``; the weights are added entry by entry
    as ``np.bincount`` does).  The plan's entries are the columns in order, then the split
    column's second row (n or n + 1 of them); writes their rows (``out_rows``), each entry's
    value times its loss and times its cost (``prod_loss``, ``prod_cost``: the products that
    ``_result_from_entries`` sums for the objective and the transport cost), the split column's
    two values (``split_vals``: (1 - theta) / n, theta / n), adds the values to ``weights`` (n, K,
    zeros on entry) and returns (entries, split column or -1, columns switched).  Every other
    entry has the value 1 / n; entry j < n costs ``cost_dear[j]`` where its row was switched to
    ``rows_dear[j]`` (a different row), else ``cost_cheap[j]``."""
    n = rows_cheap.size
    share = 1.0 / n
    for j in range(n):
        out_rows[j] = rows_cheap[j]
    size = n
    split = -1
    n_switched = 0
    if switch and deficit > 0.0:
        # k = the first column where the running sum of the cost increases reaches the deficit
        reach = 0.0
        before = 0.0
        k = n
        for j in range(n):
            d = cost_dear[j] - cost_cheap[j] if rows_dear[j] != rows_cheap[j] else 0.0
            if d < 0.0:
                d = 0.0
            before = reach
            reach += d
            if reach >= deficit:
                k = j
                break
        any_positive = k < n or reach > 0.0
        if any_positive:
            for j in range(k):
                if rows_dear[j] != rows_cheap[j] and cost_dear[j] - cost_cheap[j] > 0.0:
                    out_rows[j] = rows_dear[j]
                    n_switched += 1
            if k < n:
                d = cost_dear[k] - cost_cheap[k] if rows_dear[k] != rows_cheap[k] else 0.0
                if d < 0.0:
                    d = 0.0
                base = before if k > 0 else 0.0
                theta = min(1.0, max(0.0, (deficit - base) / d))
                if theta >= 1.0:
                    out_rows[k] = rows_dear[k]
                    n_switched += 1
                elif theta > 0.0:
                    split = k
                    split_vals[0] = (1.0 - theta) / n
                    split_vals[1] = theta / n
                    out_rows[n] = rows_dear[k]
                    size = n + 1
    for e in range(size):
        if e < n:
            j = e
            v = split_vals[0] if e == split else share
            c = cost_dear[j] if out_rows[j] != rows_cheap[j] else cost_cheap[j]
        else:
            j = split
            v = split_vals[1]
            c = cost_dear[j]
        label = labels[j]
        r = out_rows[e]
        prod_loss[e] = v * losses[r, label]
        prod_cost[e] = v * c
        weights[r, label] += v
    return size, split, n_switched
