"""The numba-compiled scan of :mod:`budro.solvers._dual_full` (imported only when numba is
installed and the compiled path is used; module-level functions so that ``cache=True`` reuses the
compiled code across processes).  :func:`budro.solvers._dual_full._scan_numpy` computes the same
lists and bounds with numpy (the two are checked against each other in the tests).

Rows are scanned in group order (``order``: the rows of group 0, then group 1, ...; the columns of
the dot-product block ``D`` and ``sqc``/``LTp`` follow it), so that each group's excluded-value
maxima are plain reductions over a contiguous segment."""

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

#: Stands for "no pair" in the excluded-value bounds (finite, so that chords stay finite).
NONE = -1e300


@intrinsic
def fmax(typingctx, a, b):
    """``max(a, b)`` of two floats of the same type as LLVM's ``maxnum`` (the larger; the other
    operand where one is NaN, which never occurs here).  Written ``x if x > m else m`` a running
    maximum is a compare and a select that LLVM does not vectorise; ``maxnum`` it does (the scan's
    passes over the rows 3x faster on AVX2/AVX-512), with the same value to the bit."""
    if not isinstance(a, numba.types.Float) or a != b:
        return None

    def codegen(context, builder, signature, args):
        t = args[0].type
        fn = builder.module.declare_intrinsic("llvm.maxnum", [t], ir.FunctionType(t, [t, t]))
        return builder.call(fn, args)

    return a(a, b), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _exact_cost(Z, sq, i, j, zero_rtol):
    """``C_ij`` by :meth:`budro.transport.EmbeddingCost.entries`'s formula and zero-snapping."""
    if i == j:
        return 0.0
    d = 0.0
    for k in range(Z.shape[1]):
        d += Z[i, k] * Z[j, k]
    return _snap(sq[i] + sq[j], d, zero_rtol)


@numba.njit(cache=True, nogil=True, inline="always")
def _snap(s, d, zero_rtol):
    """The cost ``s - 2 d`` from the squared norms' sum and the dot product, 0 where it is within
    the zero tolerance of ``s`` (the cost's own zero-snapping)."""
    c = s - 2.0 * d
    if c <= zero_rtol * s:
        return 0.0
    return c


@numba.njit(cache=True, nogil=True)
def _exact_costs(Z, sq, rows, k, j, zero_rtol, out):
    """``out[r] = _exact_cost(Z, sq, rows[r], j, zero_rtol)`` for r < k, the same values: four
    rows at a time, each dot product still summed coordinate by coordinate in order (a sum of p
    terms is a chain of dependent additions: one at a time, the processor waits on each; four
    independent chains fill its pipeline: the members' costs took a third of a scan's time)."""
    p = Z.shape[1]
    sj = sq[j]
    r = 0
    while r + 4 <= k:
        i0, i1, i2, i3 = rows[r], rows[r + 1], rows[r + 2], rows[r + 3]
        d0 = d1 = d2 = d3 = 0.0
        for t in range(p):
            zj = Z[j, t]
            d0 += Z[i0, t] * zj
            d1 += Z[i1, t] * zj
            d2 += Z[i2, t] * zj
            d3 += Z[i3, t] * zj
        out[r] = 0.0 if i0 == j else _snap(sq[i0] + sj, d0, zero_rtol)
        out[r + 1] = 0.0 if i1 == j else _snap(sq[i1] + sj, d1, zero_rtol)
        out[r + 2] = 0.0 if i2 == j else _snap(sq[i2] + sj, d2, zero_rtol)
        out[r + 3] = 0.0 if i3 == j else _snap(sq[i3] + sj, d3, zero_rtol)
        r += 4
    for x in range(r, k):
        out[x] = _exact_cost(Z, sq, rows[x], j, zero_rtol)


@numba.njit(cache=True, nogil=True, inline="always")
def _below(ca, ra, cb, rb, cc, rc, mu):
    """(cb, rb) lies more than mu below the chord from (ca, ra) to (cc, rc), ca <= cb <= cc:
    then ``R_b - eta C_b < max(R_a - eta C_a, R_c - eta C_c) - mu`` at every eta >= 0 (with
    equal costs this is dominance by the point of the same cost)."""
    dC1 = cb - ca
    dC2 = cc - ca
    return (rb - ra) * dC2 < (rc - ra) * dC1 - mu * dC2


@numba.njit(cache=True, nogil=True)
def _finish(k, j, Z, sq, zero_rtol, L, mu, gid, krow, kc, kl, keep):
    """Members ``krow[:k]`` (rows) of column j: exact costs, increasing cost (stable: rows
    ascending among equal costs), dominance and upper hull with margin mu.  The kept pairs go back
    to krow/kc/kl; returns their number and the bit mask of the groups of the pruned ones."""
    krow[:k] = np.sort(krow[:k])
    _exact_costs(Z, sq, krow, k, j, zero_rtol, kc)
    order = np.argsort(kc[:k], kind="mergesort")
    rows_s = krow[:k][order]
    cost_s = kc[:k][order]
    mask = np.int64(0)
    # dominance with margin mu: keep r iff R_r + mu >= max(R before r)
    best = -np.inf
    h = 0
    for r in range(k):
        li = L[rows_s[r]]
        if li + mu >= best or r == 0:
            keep[h] = r
            h += 1
        else:
            mask |= np.int64(1) << np.int64(gid[rows_s[r]])
        if li > best:
            best = li
    # upper hull with margin mu (stack in cost order)
    s = 0
    for x in range(h):
        r = keep[x]
        while s >= 2:
            a = keep[s - 2]
            b = keep[s - 1]
            if _below(cost_s[a], L[rows_s[a]], cost_s[b], L[rows_s[b]], cost_s[r], L[rows_s[r]], mu):
                mask |= np.int64(1) << np.int64(gid[rows_s[b]])
                s -= 1
            else:
                break
        keep[s] = r
        s += 1
    for x in range(s):
        r = keep[x]
        krow[x] = rows_s[r]
        kc[x] = cost_s[r]
        kl[x] = L[rows_s[r]]
    return s, mask


@numba.njit(cache=True, nogil=True, inline="always")
def _max4(m0, m1, m2, m3, li, c, e0, e1, e2, e3):
    """The running maxima of ``li - e * c`` at the four grid points."""
    return fmax(m0, li - e0 * c), fmax(m1, li - e1 * c), fmax(m2, li - e2 * c), fmax(m3, li - e3 * c)


@numba.njit(cache=True, nogil=True, inline="always")
def _put4(X, t, g, m0, m1, m2, m3):
    X[t, g, 0] = m0
    X[t, g, 1] = m1
    X[t, g, 2] = m2
    X[t, g, 3] = m3


#: Rows per block of :func:`_members_fast`'s search for members.
_MEMBER_BLOCK = 64


@numba.njit(cache=True, nogil=True, inline="always")
def _needed_runs(own, delta, skip, ustart, um, runs):
    """The runs of rows (in scan order) whose units may hold a member: a unit of rows whose
    largest loss under the column's label ``um[u]`` is below ``own - skip * delta`` holds none
    (a pair's slack is at most its loss minus the column's own value: costs are >= 0).  Runs of
    needed units in ``runs[2r], runs[2r + 1]``; returns their number and that cut (``NONE``,
    nothing passed over, where ``skip`` or ``delta`` is 0)."""
    nu = um.size
    cut = own - skip * delta if delta > 0.0 and skip > 0.0 else NONE
    r = 0
    u = 0
    while u < nu:
        if um[u] < cut:
            u += 1
            continue
        lo = ustart[u]
        while u < nu and um[u] >= cut:
            u += 1
        runs[2 * r] = lo
        runs[2 * r + 1] = ustart[u]
        r += 1
    return r, cut


@numba.njit(cache=True, nogil=True, fastmath=True)
def _members_fast(t, jp, D, sqc, err, Lp, E, delta, kmax, seg, X, cb, sl, order, krow, skip, ustart, gunit, um,
                  runs):
    """The standard grid (4 points, members tested on the first 2 intervals): members' rows in
    krow and the excluded maxima per group in X[t]; returns (members, allowance used).  The
    allowance is ``delta`` or, where that makes more than ``kmax`` members, delta / 4, / 16, / 64.  Vectorised (fastmath:
    values may differ from the numpy path's in the last bit, which the certificate's rounding
    room covers; membership is a choice, not a bound, and X is computed from the same membership tests).
    Only the rows of units that may hold a member are read (:func:`_needed_runs`); a group's
    bound takes each passed-over unit's largest loss instead (an upper bound of its values)."""
    sj = sqc[jp]
    e0 = E[0]
    e1 = E[1]
    e2 = E[2]
    e3 = E[3]
    v1 = Lp[jp]
    v2 = Lp[jp]
    Dt = D[t]
    nr, cut = _needed_runs(Lp[jp], delta, skip, ustart, um, runs)
    # over slices from 0: a loop from an offset is not vectorised (6x slower)
    for r in range(nr):
        lo, hi = runs[2 * r], runs[2 * r + 1]
        Dr, sr, Lr, cr = Dt[lo:hi], sqc[lo:hi], Lp[lo:hi], cb[lo:hi]
        for i in range(hi - lo):
            c = sr[i] + sj - 2.0 * Dr[i]
            cr[i] = c
            cu = c + err
            v1 = fmax(v1, Lr[i] - e1 * cu)
            v2 = fmax(v2, Lr[i] - e2 * cu)
    n0 = 0
    for r in range(nr):
        lo, hi = runs[2 * r], runs[2 * r + 1]
        Lr, cr, slr = Lp[lo:hi], cb[lo:hi], sl[lo:hi]
        for i in range(hi - lo):
            c = cr[i] - err
            c = c if c > 0.0 else 0.0
            cr[i] = c
            a = Lr[i] - e0 * c - v1
            b = Lr[i] - e1 * c - v2
            x = fmax(a, b)  # the pair is a member for allowances >= -x
            slr[i] = x
            n0 += x >= -delta
    d = delta
    if n0 > kmax:  # the smaller allowances' counts only where delta makes too many members
        d1, d2 = delta / 4.0, delta / 16.0
        n1 = n2 = 0
        for r in range(nr):
            slr = sl[runs[2 * r]:runs[2 * r + 1]]
            for i in range(slr.size):
                n1 += slr[i] >= -d1
                n2 += slr[i] >= -d2
        d = d1 if n1 <= kmax else (d2 if n2 <= kmax else delta / 64.0)
    # a member: sl >= -d, and the own row always (no flag array: the test is repeated where
    # it is needed, one pass over the rows less); blocks of rows without one are passed over
    # after a vectorised maximum (members are few: a branch per row was a fifth of these passes)
    sl[jp] = 1.0
    k = 0
    for r in range(nr):
        hi = runs[2 * r + 1]
        for lo in range(runs[2 * r], hi, _MEMBER_BLOCK):
            sb = sl[lo:min(hi, lo + _MEMBER_BLOCK)]
            top = NONE
            for i in range(sb.size):
                top = fmax(top, sb[i])
            if top >= -d:
                for i in range(sb.size):
                    if sb[i] >= -d:
                        krow[k] = order[lo + i]
                        k += 1
    for g in range(seg.size - 1):
        m0 = m1 = m2 = m3 = NONE
        for u in range(gunit[g], gunit[g + 1]):
            if um[u] < cut:  # passed over: its largest loss bounds its values at every eta >= 0
                top = um[u]
                m0, m1, m2, m3 = fmax(m0, top), fmax(m1, top), fmax(m2, top), fmax(m3, top)
                continue
            Lg = Lp[ustart[u]:ustart[u + 1]]
            sg = sl[ustart[u]:ustart[u + 1]]
            cg = cb[ustart[u]:ustart[u + 1]]
            for i in range(Lg.size):
                li = Lg[i] - (2e300 if sg[i] >= -d else 0.0)
                m0, m1, m2, m3 = _max4(m0, m1, m2, m3, li, cg[i], e0, e1, e2, e3)
        _put4(X, t, g, m0, m1, m2, m3)
    return k, d


#: Columns scanned together by :func:`_tile_members`, and rows per chunk of its passes (the
#: chunk's costs and losses stay in the first-level cache while each column of the tile reads them).
#: Used where the rows' arrays outgrow the caches (``tiled``: n >= ``_dual_full._TILE_MIN_N``):
#: at n = 10^6 5.1-5.4 against 8.4-10.3 ms a column on one thread; at Adult's 36177 rows slower
#: (245 against 138-198 us), where :func:`_members_fast`'s n-long arrays stay in the caches.
TILE = 4
_RC = 1024


@numba.njit(cache=True, nogil=True, inline="always")
def _tile_chunk(D, LTp, lab, sj, err, v1, v2, t, tt, c0, c1):
    """Column t's (the tile's tt-th) dot products and losses on rows c0..c1, and its own
    squared norm, cost error and maxima at E[1], E[2]."""
    return D[t, c0:c1], LTp[lab[tt], c0:c1], sj[tt], err[tt], v1[tt], v2[tt]


@numba.njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz"})
def _tile_members(t0, tb, cols, jpos, labels, D, sqc, kappa, sqc_max, LTp, E, delta, kmax, seg, X, order, mem,
                  kcount, dsel):
    """The standard grid (4 points, members tested on the first 2 intervals) for the ``tb``
    columns ``t0 ..`` of the block at once: members' rows in ``mem[tt, :kcount[tt]]``, the
    excluded maxima per group in ``X[t]``, the allowance used in ``dsel[tt]``: ``delta`` or, where
    that makes more than ``kmax`` members, delta / 4, / 16, / 64.

    Three passes over the rows in chunks of ``_RC`` (the column maxima at E[1], E[2]; the members'
    counts per allowance; the members and the excluded maxima), each chunk read once for the
    whole tile, the costs recomputed from the dot products in each pass rather than stored: a
    column's passes touch 4 bytes a row instead of the ~100 of five n-long arrays.  No
    reassociation or contraction (only the NaN, infinity and signed-zero assumptions): each
    value is computed the same way in every pass, so the counts of pass 2 are those of pass 3;
    maxima by :func:`fmax`, vectorised."""
    n = sqc.size
    e0 = E[0]
    e1 = E[1]
    e2 = E[2]
    e3 = E[3]
    sj = np.empty(tb)
    err = np.empty(tb)
    v1 = np.empty(tb)
    v2 = np.empty(tb)
    lab = np.empty(tb, dtype=np.int64)
    for tt in range(tb):
        t = t0 + tt
        jp = jpos[t]
        lab[tt] = labels[cols[t]]
        sj[tt] = sqc[jp]
        err[tt] = kappa * (sqc_max + sqc[jp])
        v1[tt] = LTp[lab[tt], jp]
        v2[tt] = LTp[lab[tt], jp]
    # pass 1: each column's maximum at E[1] and E[2] over its costs rounded up
    for c0 in range(0, n, _RC):
        c1 = min(n, c0 + _RC)
        sq = sqc[c0:c1]
        for tt in range(tb):
            Dt, Lt, s, e, a, b = _tile_chunk(D, LTp, lab, sj, err, v1, v2, t0 + tt, tt, c0, c1)
            for i in range(c1 - c0):
                cu = sq[i] + s - 2.0 * Dt[i] + e
                a = fmax(a, Lt[i] - e1 * cu)
                b = fmax(b, Lt[i] - e2 * cu)
            v1[tt] = a
            v2[tt] = b
    # pass 2: members per allowance (a pair is a member for allowances >= -x)
    d1, d2, d3 = delta / 4.0, delta / 16.0, delta / 64.0
    cnt = np.zeros((tb, 4), dtype=np.int64)
    for c0 in range(0, n, _RC):
        c1 = min(n, c0 + _RC)
        sq = sqc[c0:c1]
        for tt in range(tb):
            Dt, Lt, s, e, a, b = _tile_chunk(D, LTp, lab, sj, err, v1, v2, t0 + tt, tt, c0, c1)
            n0 = n1 = n2 = n3 = 0
            for i in range(c1 - c0):
                c = sq[i] + s - 2.0 * Dt[i] - e
                c = c if c > 0.0 else 0.0
                x = fmax(Lt[i] - e0 * c - a, Lt[i] - e1 * c - b)
                n0 += x >= -delta
                n1 += x >= -d1
                n2 += x >= -d2
                n3 += x >= -d3
            cnt[tt, 0] += n0
            cnt[tt, 1] += n1
            cnt[tt, 2] += n2
            cnt[tt, 3] += n3
    for tt in range(tb):
        dsel[tt] = delta if cnt[tt, 0] <= kmax else (
            d1 if cnt[tt, 1] <= kmax else (d2 if cnt[tt, 2] <= kmax else d3))
        kcount[tt] = 0
    # pass 3, group by group (contiguous segments): the members (x >= -allowance, the own row
    # always) and the largest value of the others at each grid point
    flags = np.empty(_RC)
    for g in range(seg.size - 1):
        for tt in range(tb):
            _put4(X, t0 + tt, g, NONE, NONE, NONE, NONE)
        for c0 in range(seg[g], seg[g + 1], _RC):
            c1 = min(seg[g + 1], c0 + _RC)
            sq = sqc[c0:c1]
            for tt in range(tb):
                t = t0 + tt
                Dt, Lt, s, e, a, b = _tile_chunk(D, LTp, lab, sj, err, v1, v2, t, tt, c0, c1)
                h = -dsel[tt]
                own = jpos[t] - c0  # the own row's place in the chunk (outside it: never met)
                m0 = X[t, g, 0]
                m1 = X[t, g, 1]
                m2 = X[t, g, 2]
                m3 = X[t, g, 3]
                k = 0
                for i in range(c1 - c0):
                    c = sq[i] + s - 2.0 * Dt[i] - e
                    c = c if c > 0.0 else 0.0
                    x = fmax(Lt[i] - e0 * c - a, Lt[i] - e1 * c - b)
                    x = 1.0 if i == own else x
                    flags[i] = x
                    member = x >= h
                    k += member
                    li = Lt[i] - (2e300 if member else 0.0)
                    m0, m1, m2, m3 = _max4(m0, m1, m2, m3, li, c, e0, e1, e2, e3)
                _put4(X, t, g, m0, m1, m2, m3)
                if k:
                    kk = kcount[tt]
                    for i in range(c1 - c0):
                        if flags[i] >= h:
                            mem[tt, kk] = order[c0 + i]
                            kk += 1
                    kcount[tt] = kk


@numba.njit(cache=True, nogil=True, fastmath={"nnan", "ninf", "nsz"})
def _members(t, jp, D, sqc, err, Lp, E, q_lo, q_hi, delta, seg, X, v, thr, order, krow, cb, sl):
    """Any grid: members' rows in krow (returned count), excluded maxima per group in X[t].
    Loops over the rows innermost, group segments as slices, maxima by :func:`fmax`: vectorised,
    with each value computed as before (no reassociation or contraction: only the NaN, infinity
    and signed-zero assumptions, none of which arise)."""
    n = sqc.size
    Q = E.size
    sj = sqc[jp]
    Dt = D[t]
    for i in range(n):
        cb[i] = sqc[i] + sj - 2.0 * Dt[i]
    # the column's maxima at the grid points, four points per pass over the rows (the last pass
    # repeats its last point where fewer are left: the same maximum twice)
    for q0 in range(q_lo, q_hi + 1, 4):
        qa, qb, qc, qd = q0, min(q0 + 1, q_hi), min(q0 + 2, q_hi), min(q0 + 3, q_hi)
        ea, eb, ec, ed = E[qa], E[qb], E[qc], E[qd]
        ma = mb = mc = md = Lp[jp]  # the own row (cost 0) is always a pair
        for i in range(n):
            cu = cb[i] + err
            ma, mb, mc, md = _max4(ma, mb, mc, md, Lp[i], cu, ea, eb, ec, ed)
        v[qa], v[qb], v[qc], v[qd] = ma, mb, mc, md
    for q in range(q_lo, q_hi):
        thr[q] = v[q + 1] - delta
    for i in range(n):
        c = cb[i] - err
        cb[i] = c if c > 0.0 else 0.0
    # a member comes within the allowance at some grid interval: sl >= 0 (the own row always);
    # four intervals per pass
    for i in range(n):
        sl[i] = -1.0
    last = q_hi - 1
    for q0 in range(q_lo, q_hi, 4):
        qa, qb, qc, qd = q0, min(q0 + 1, last), min(q0 + 2, last), min(q0 + 3, last)
        ea, eb, ec, ed = E[qa], E[qb], E[qc], E[qd]
        ha, hb, hc, hd = thr[qa], thr[qb], thr[qc], thr[qd]
        for i in range(n):
            li = Lp[i]
            c = cb[i]
            inside = (li - ea * c >= ha) | (li - eb * c >= hb) | (li - ec * c >= hc) | (li - ed * c >= hd)
            sl[i] = fmax(sl[i], 1.0 if inside else -1.0)
    sl[jp] = 1.0
    k = 0
    for i in range(n):
        if sl[i] >= 0.0:
            krow[k] = order[i]
            k += 1
    for g in range(seg.size - 1):
        Lg = Lp[seg[g]:seg[g + 1]]
        sg = sl[seg[g]:seg[g + 1]]
        cg = cb[seg[g]:seg[g + 1]]
        for q in range(Q):
            e = E[q]
            m = NONE
            for i in range(Lg.size):
                m = fmax(m, (Lg[i] - e * cg[i]) if sg[i] < 0.0 else NONE)
            X[t, g, q] = m
    return k


@numba.njit(cache=True, nogil=True, parallel=True)
def scan(cols, jpos, D, sqc_p, kappa, sqc_max, Z, sq, zero_rtol, LTp, LT, labels, E, q_lo, q_hi, delta, mu, kmax,
         gid, order, seg, fast, tiled, X, masks, mus, out_rows, out_C, out_R, counts, cap, nchunks, skip, ustart, gunit,
         UM):
    """Scan the columns ``cols`` (own rows at positions ``jpos`` of the scan order; their dot
    products in the rows of ``D``); column t's kept list goes to ``out_*[t * cap:]``
    (``counts[t]``, or minus its length when over ``cap``), its hull margin to ``mus[t]``
    (``min(mu, allowance used)``).  The standard grid (``fast``) by :func:`_tile_members` when
    ``tiled``, else column by column by :func:`_members_fast` (rows in units ``ustart``, each
    group's units from ``gunit[g]``, their largest loss per label in ``UM``; a unit ``skip``
    allowances below the column's own loss is passed over); any other grid by :func:`_members`."""
    b = cols.size
    n = sqc_p.size
    Q = E.size
    for ch in numba.prange(nchunks):
        t0 = ch * b // nchunks
        t1 = (ch + 1) * b // nchunks
        krow = np.empty(n, dtype=np.int64)
        kc = np.empty(n)
        kl = np.empty(n)
        keep = np.empty(n, dtype=np.int64)
        if fast and tiled:
            mem = np.empty((TILE, n), dtype=np.int64)
            kcount = np.empty(TILE, dtype=np.int64)
            dsel = np.empty(TILE)
            for ta in range(t0, t1, TILE):
                tb = min(TILE, t1 - ta)
                _tile_members(ta, tb, cols, jpos, labels, D, sqc_p, kappa, sqc_max, LTp, E, delta, kmax, seg, X, order,
                              mem, kcount, dsel)
                for tt in range(tb):
                    k = kcount[tt]
                    krow[:k] = mem[tt, :k]
                    _emit(ta + tt, k, dsel[tt], cols, labels, Z, sq, zero_rtol, LT, mu, gid, krow, kc, kl, keep, masks,
                          mus, out_rows, out_C, out_R, counts, cap)
            continue
        cb = np.empty(n)
        sl = np.empty(n)
        v = np.empty(Q)
        thr = np.empty(Q)
        runs = np.empty(2 * ustart.size, dtype=np.int64)
        for t in range(t0, t1):
            jp = jpos[t]
            err = kappa * (sqc_max + sqc_p[jp])
            d = delta
            if fast:
                lab = labels[cols[t]]
                k, d = _members_fast(t, jp, D, sqc_p, err, LTp[lab], E, delta, kmax, seg, X, cb, sl, order, krow, skip,
                                     ustart, gunit, UM[lab], runs)
            else:
                k = _members(t, jp, D, sqc_p, err, LTp[labels[cols[t]]], E, q_lo, q_hi, delta, seg, X, v, thr, order,
                             krow, cb, sl)
            _emit(t, k, d, cols, labels, Z, sq, zero_rtol, LT, mu, gid, krow, kc, kl, keep, masks, mus, out_rows,
                  out_C, out_R, counts, cap)


@numba.njit(cache=True, nogil=True)
def _emit(t, k, d, cols, labels, Z, sq, zero_rtol, LT, mu, gid, krow, kc, kl, keep, masks, mus, out_rows, out_C,
          out_R, counts, cap):
    """Column t's members ``krow[:k]`` (allowance ``d``) to its kept list in ``out_*[t * cap:]``."""
    j = cols[t]
    m = mu if mu < d else d
    mus[t] = m
    s, mask = _finish(k, j, Z, sq, zero_rtol, LT[labels[j]], m, gid, krow, kc, kl, keep)
    masks[t] = mask
    if s > cap:
        counts[t] = -s
        return
    counts[t] = s
    base = t * cap
    for x in range(s):
        out_rows[base + x] = krow[x]
        out_C[base + x] = kc[x]
        out_R[base + x] = kl[x]


@numba.njit(cache=True, nogil=True)
def compact(counts, cap, rows, C, R):  # pragma: no cover - compiled
    """Move the lists that :func:`scan` wrote at ``t * cap`` (``counts[t]`` long; none where
    ``counts[t] < 0``, over ``cap``) down to follow each other from 0, in column order; returns
    their total length (work in the entries kept, not in ``b * cap``)."""
    k = 0
    for t in range(counts.size):
        m = counts[t]
        if m <= 0:
            continue
        base = t * cap
        if base != k:  # base > k: each entry moves down, after the one before it
            for x in range(m):
                rows[k + x] = rows[base + x]
                C[k + x] = C[base + x]
                R[k + x] = R[base + x]
        k += m
    return k


@numba.njit(cache=True, nogil=True, parallel=True)
def certify_bounds(eta, cols, anchor_of, labels, E, top, up, X, mask, B, P):  # pragma: no cover - compiled
    """The certificate's bounds at ``eta`` (``budro.solvers._dual_full._certify``, the same values
    as its numpy loop over anchors) for the columns ``cols``: per column j with anchor a and label
    k, ``B[j]`` = the largest over groups g of the left-out bound (``top[a, g, k]`` below the
    anchor's grid ``E[a]``, the last grid value past it, else the chord of ``X[j, g]`` between the
    grid points around eta) plus the group's rise ``up[a, g, k]`` (0 where not finite); ``P[j]`` =
    the largest rise over the groups of the column's hull-pruned rows (bits of ``mask[j]``), -inf
    if none."""
    _, G, Q = X.shape
    for i in numba.prange(cols.size):
        j = cols[i]
        a = anchor_of[j]
        k = labels[j]
        q = -1  # the last grid point <= eta (searchsorted, side "right", minus 1)
        for x in range(Q):
            if E[a, x] <= eta:
                q = x
        lam = 0.0
        if 0 <= q < Q - 1:
            lam = (eta - E[a, q]) / (E[a, q + 1] - E[a, q])
        b = -np.inf
        p = -np.inf
        m = mask[j]
        for g in range(G):
            if q < 0:
                bound = top[a, g, k]
            elif q >= Q - 1:
                bound = X[j, g, Q - 1]
            else:
                bound = X[j, g, q] + lam * (X[j, g, q + 1] - X[j, g, q])
            u = up[a, g, k]
            v = bound + (u if np.isfinite(u) else 0.0)
            if v > b:
                b = v
            if (m >> g) & 1 and u > p:
                p = u
        B[j] = b
        P[j] = p


@numba.njit(cache=True, nogil=True, parallel=True)
def list_down(lo, hi, flat, cols, anchor_of, anchor_losses, losses_flat, out, nchunks, direct):
    """Per column j of ``cols``, ``out[j]`` = the largest fall of a listed pair's loss since the
    column's anchor: ``max (A[flat] - losses_flat[flat])`` over its list ``flat[lo[j]:hi[j]]``, ``A =
    anchor_losses[anchor_of[j]]``.  The columns are taken in the order ``cols`` (best the order
    of their anchors), in ``nchunks`` chunks of it, one task each (every column's value is its
    own); a task computes ``A - losses_flat`` once for each anchor it meets and gathers from that
    alone (gathers from two arrays of every anchor miss the cache: 3-4x slower at Adult), unless
    ``direct`` (few pairs per anchor: the two gathers cost less than a pass over ``A``)."""
    n = cols.size
    for ch in numba.prange(nchunks):
        fall = np.empty(0 if direct else losses_flat.size)
        current = -1
        for t in range(ch * n // nchunks, (ch + 1) * n // nchunks):
            j = cols[t]
            a = anchor_of[j]
            if direct:
                A = anchor_losses[a]
                m = -np.inf
                for r in range(lo[j], hi[j]):
                    f = flat[r]
                    m = fmax(m, A[f] - losses_flat[f])
                out[j] = m
                continue
            if a != current:
                A = anchor_losses[a]
                for f in range(fall.size):
                    fall[f] = A[f] - losses_flat[f]
                current = a
            fj = flat[lo[j]:hi[j]]  # slices from 0 and fmax: vectorised (gathers)
            m = -np.inf
            for r in range(fj.size):
                m = fmax(m, fall[fj[r]])
            out[j] = m


@numba.njit(cache=True, nogil=True)
def batch_argmax_costs(G, sq, sq_cols, cols, losses, labels_cols, eta, zero_rtol):
    """The cheapest argmax cost of each sampled column at ``eta`` (``dual-sgd``/``paper``'s
    minibatch, :meth:`budro.solvers.sgd._Batches.argmax_costs`) in one pass over the dot products
    ``G = Z @ Z[cols].T``, by the same formula and zero-snapping as
    :meth:`~budro.solvers.sgd._Batches.columns` (entry for entry the same operations)."""
    n, b = G.shape
    best = np.full(b, -np.inf)
    cheapest = np.full(b, np.inf)
    for i in range(n):
        si = sq[i]
        for k in range(b):
            s = si + sq_cols[k]
            c = s - 2.0 * G[i, k]
            if c <= zero_rtol * s or i == cols[k]:
                c = 0.0
            v = losses[i, labels_cols[k]] - eta * c
            if v > best[k]:
                best[k] = v
                cheapest[k] = c
            elif v == best[k] and c < cheapest[k]:
                cheapest[k] = c
    return cheapest


@numba.njit(cache=True, nogil=True, parallel=True)
def group_rises(losses, ids, gids, anchor_losses, out):  # pragma: no cover - compiled
    """For each anchor x (id ``ids[x]``, its rows' groups ``gids[x]``), group g and label k:
    ``out[x, g, k] = max (losses[i, k] - anchor_losses[ids[x], i K + k])`` over the rows i of
    group g, -inf for an empty group (``budro.solvers._dual_full._Anchor.up``), the rows in
    natural order (no gathers), anchors in parallel."""
    n, K = losses.shape
    G = out.shape[1]
    for x in numba.prange(ids.size):
        A = anchor_losses[ids[x]]
        gid = gids[x]
        o = out[x]
        for g in range(G):
            for k in range(K):
                o[g, k] = -np.inf
        for i in range(n):
            g = gid[i]
            for k in range(K):
                d = losses[i, k] - A[i * K + k]
                if d > o[g, k]:
                    o[g, k] = d


@numba.njit(cache=True, nogil=True, inline="always")
def _put_scanned(j, i, dst, off, new_rows, new_C, labels, K, flat, C):
    """Column j's scanned list (the i-th of ``new_*``, from ``off[i]``) written from ``dst``, its
    flat indices made from its rows and label."""
    src = off[i]
    lab = labels[j]
    for x in range(off[i + 1] - src):
        flat[dst + x] = new_rows[src + x] * K + lab
        C[dst + x] = new_C[src + x]


@numba.njit(cache=True, nogil=True, parallel=True)
def merge_lists(old_lo, old_hi, new_ptr, replaced, off, old_flat, old_C, new_rows, new_C, labels, K, out_flat, out_C,
                nchunks):
    """The lists after a rescan (:func:`budro.solvers._dual_full._commit`) packed in column order,
    in one pass: column j takes the scanned list ``new_*[off[replaced[j]]:]`` where
    ``replaced[j] >= 0``, else its old list ``old_*[old_lo[j]:old_hi[j]]``; both are written at
    ``new_ptr[j]``."""
    n = old_lo.size
    for ch in numba.prange(nchunks):
        for j in range(ch * n // nchunks, (ch + 1) * n // nchunks):
            i = replaced[j]
            if i >= 0:
                _put_scanned(j, i, new_ptr[j], off, new_rows, new_C, labels, K, out_flat, out_C)
            else:
                dst = new_ptr[j]
                src = old_lo[j]
                for x in range(old_hi[j] - src):
                    out_flat[dst + x] = old_flat[src + x]
                    out_C[dst + x] = old_C[src + x]


@numba.njit(cache=True, nogil=True, parallel=True)
def place_lists(cols, dest, off, new_rows, new_C, labels, K, flat, C, nchunks):
    """The scanned lists written where the commit put them: the i-th (``new_*[off[i]:off[i + 1]]``,
    column ``cols[i]``) from ``dest[i]`` (disjoint ranges: in place of the column's old list, or
    past the pool's end)."""
    m = cols.size
    for ch in numba.prange(nchunks):
        for i in range(ch * m // nchunks, (ch + 1) * m // nchunks):
            _put_scanned(cols[i], i, dest[i], off, new_rows, new_C, labels, K, flat, C)


@numba.njit(cache=True, nogil=True, parallel=True)
def splice_runs(old, old_starts, old_counts, new, new_starts, new_counts, replaced, out_starts, out, nchunks):
    """Per-column runs spliced (``budro.solvers._dual_full._splice_output``): column j's run, from
    ``new`` where ``replaced[j] >= 0`` (the ``replaced[j]``-th run there) else from ``old``,
    written at ``out_starts[j]``; columns in ``nchunks`` chunks, one task each."""
    n = old_counts.size
    for ch in numba.prange(nchunks):
        for j in range(ch * n // nchunks, (ch + 1) * n // nchunks):
            i = replaced[j]
            d = out_starts[j]
            if i >= 0:
                s = new_starts[i]
                for x in range(new_counts[i]):
                    out[d + x] = new[s + x]
            else:
                s = old_starts[j]
                for x in range(old_counts[j]):
                    out[d + x] = old[s + x]
