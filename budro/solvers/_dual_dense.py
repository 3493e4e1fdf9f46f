"""The dense path of :class:`~budro.solvers.dual.DualSolver`: ``g`` evaluated column block by
column block on any :class:`~budro.transport.Cost` (no n x n array unless the cost holds one),
and the candidate pairs that can tie inside a bracket, collected in one pass and narrowed as the
bracket shrinks."""

from __future__ import annotations

import numpy as np

from budro.solvers._dual_plan import _Candidates, _DualPoint, tie_margin
from budro.transport import DenseCost, EmbeddingCost, TransportProblem

#: The cutting plane runs on candidate pairs only while there are at most this many per column
#: on average; beyond that (massive exact ties) it keeps evaluating g on whole blocks.
_CANDIDATES_PER_COLUMN = 64

#: Above this share of tied entries in a block, the argmax-set extremes are found with dense
#: masked argmin/argmax instead of from the list of tied entries.
_DENSE_TIE_SHARE = 0.125


def block_columns(solver, problem: TransportProblem) -> int:
    """Columns per block: ``block_bytes`` worth of float64 columns, whether or not C is dense."""
    cost, n = problem.cost, problem.n
    if cost.is_dense:
        return int(max(1, min(n, solver.block_bytes // max(8 * n, 1))))
    return int(max(1, min(n, cost.block_size(solver.block_bytes))))


def evaluate(solver, problem: TransportProblem, eta: float) -> _DualPoint:
    """``g(eta)`` with each column's cheapest and most expensive argmax row (block by block)."""
    n, eps = problem.n, problem.eps
    cost, losses, labels = problem.cost, problem.losses, problem.labels
    scale = problem.max_abs_loss
    lo = np.empty(n, dtype=np.intp)
    hi = np.empty(n, dtype=np.intp)
    c_lo = np.empty(n)
    c_hi = np.empty(n)
    vmax_sum = 0.0
    width = block_columns(solver, problem)
    # 0 * inf: unlisted pairs (any cost that may hold +inf) stay out at eta = 0 too.
    forbid = eta == 0.0 and not isinstance(cost, (DenseCost, EmbeddingCost))
    # Flat buffers viewed as C-ordered (n, m) blocks: same layout as the cost blocks, reused.
    v_buf = np.empty(n * width)
    t_buf = np.empty(n * width) if eta != 0.0 else None
    m_buf = np.empty(n * width, dtype=bool)
    for start in range(0, n, width):
        stop = min(n, start + width)
        m = stop - start
        Cb = cost.column_block(start, stop)
        V = v_buf[: n * m].reshape(n, m)
        np.take(losses, labels[start:stop], axis=1, out=V, mode="clip")  # R[:, start:stop]
        if t_buf is not None:
            T = t_buf[: n * m].reshape(n, m)
            np.multiply(Cb, eta, out=T)
            np.subtract(V, T, out=V)
        elif forbid:
            np.copyto(V, -np.inf, where=np.isinf(Cb))
        vmax = V.max(axis=0)
        vmax_sum += float(vmax.sum())
        ties = m_buf[: n * m].reshape(n, m)
        np.greater_equal(V, vmax - solver.tie_rtol * (scale + np.abs(vmax)), out=ties)
        # V is free now; the argmax set of every column is non-empty (it holds the max itself).
        sl = slice(start, stop)
        _tie_extremes(Cb, ties, V, lo[sl], hi[sl], c_lo[sl], c_hi[sl])
    value = eps * eta + vmax_sum / n
    return _DualPoint(eta=float(eta), value=value, lo=lo, hi=hi, c_lo=c_lo, c_hi=c_hi)


def candidates(solver, problem: TransportProblem, a: _DualPoint, b: _DualPoint) -> _Candidates | None:
    """The pairs that can be near-argmax pairs anywhere in ``[a.eta, b.eta]`` (one pass over C).

    For eta in the bracket, ``g_j(eta) >= max(La_j(eta), Lb_j(eta))`` where ``La_j`` is the line
    of row ``lo_j(a)`` and ``Lb_j`` the line of row ``hi_j(b)``.  Row i ties at some eta only if
    ``h(eta) = line_i(eta) - max(La_j, Lb_j)(eta) >= -tol``; h is concave with its kink where the
    two lines cross, so testing h at a, b and that crossing point ``x_j`` is enough.  Evaluating
    ``g`` on these pairs reproduces the full evaluation exactly (same arithmetic per pair), for
    every eta in the bracket and hence in every later, narrower bracket.  Returns None when the
    pairs would be too many to be worth it (e.g. massive exact ties).
    """
    n = problem.n
    cost, losses, labels = problem.cost, problem.losses, problem.labels
    limits = thresholds(solver, problem, a, b)
    cap = _CANDIDATES_PER_COLUMN * n
    width = block_columns(solver, problem)
    v_buf, t_buf = np.empty(n * width), np.empty(n * width)
    keep_buf, hit_buf = np.empty(n * width, dtype=bool), np.empty(n * width, dtype=bool)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    total = 0
    for start in range(0, n, width):
        stop = min(n, start + width)
        m = stop - start
        Cb = cost.column_block(start, stop)
        V = v_buf[: n * m].reshape(n, m)
        T = t_buf[: n * m].reshape(n, m)
        keep = keep_buf[: n * m].reshape(n, m)
        hit = hit_buf[: n * m].reshape(n, m)
        np.take(losses, labels[start:stop], axis=1, out=V, mode="clip")
        keep.fill(False)
        for eta, thr in limits:
            eta_b = eta[start:stop] if isinstance(eta, np.ndarray) else eta
            with np.errstate(invalid="ignore"):  # 0 * inf for forbidden pairs: NaN, never kept
                np.multiply(Cb, eta_b, out=T)
            np.subtract(V, T, out=T)
            np.greater_equal(T, thr[start:stop], out=hit)
            np.logical_or(keep, hit, out=keep)
        total += int(np.count_nonzero(keep))
        if total > cap * stop / n:  # on course to exceed the cap: give up early
            return None
        rows, cols = np.nonzero(keep)
        order = np.argsort(cols, kind="stable")
        rows, cols = rows[order], cols[order]
        parts.append((rows, cols + start, np.asarray(Cb[rows, cols], dtype=np.float64)))
    rows = np.concatenate([p[0] for p in parts])
    cols = np.concatenate([p[1] for p in parts])
    C = np.concatenate([p[2] for p in parts])
    starts = np.searchsorted(cols, np.arange(n))
    if np.any(np.bincount(cols, minlength=n) == 0):
        return None  # cannot happen (row lo_j(a) always qualifies); stay on the safe side
    return _Candidates(rows=rows, cols=cols, starts=starts, R=losses[rows, labels[cols]], C=C)


def thresholds(solver, problem: TransportProblem, a: _DualPoint, b: _DualPoint) -> list:
    """``(eta, threshold_j)`` at ``a.eta``, ``b.eta`` and the crossing points ``x_j`` (see
    :meth:`_candidates`): a pair below all three thresholds never ties inside ``[a, b]``."""
    losses, labels = problem.losses, problem.labels
    tau = tie_margin(solver, problem)
    ra, ca = losses[a.lo, labels], a.c_lo
    rb, cb = losses[b.hi, labels], b.c_hi
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(ca > cb, (ra - rb) / (ca - cb), a.eta)
    x = np.clip(np.nan_to_num(x, nan=a.eta), a.eta, b.eta)
    return [(eta, np.maximum(ra - eta * ca, rb - eta * cb) - tau) for eta in (a.eta, b.eta, x)]


def narrow(solver, problem: TransportProblem, cand: _Candidates, a: _DualPoint, b: _DualPoint) -> _Candidates:
    """The candidate pairs that can still tie inside ``[a.eta, b.eta]`` (same test as
    :meth:`_candidates`, applied to the pairs already held: O(len(cand.rows)))."""
    keep = np.zeros(cand.rows.size, dtype=bool)
    for eta, thr in thresholds(solver, problem, a, b):
        eta_p = eta[cand.cols] if isinstance(eta, np.ndarray) else eta
        keep |= cand.R - cand.C * eta_p >= thr[cand.cols]
    if keep.all():
        return cand
    counts = np.bincount(cand.cols[keep], minlength=problem.n)
    if np.any(counts == 0):
        return cand  # cannot happen (row lo_j(a) always qualifies); stay on the safe side
    starts = np.zeros(problem.n, dtype=np.intp)
    np.cumsum(counts[:-1], out=starts[1:])
    return _Candidates(rows=cand.rows[keep], cols=cand.cols[keep], starts=starts, R=cand.R[keep], C=cand.C[keep],
                       floor=cand.floor, ceiling=cand.ceiling)


def _tie_extremes(
    Cb: np.ndarray,
    ties: np.ndarray,
    scratch: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    c_lo: np.ndarray,
    c_hi: np.ndarray,
) -> None:
    """For each column of ``Cb``, the cheapest and the most expensive row among ``ties`` (the
    argmax set), written into ``lo``/``c_lo`` and ``hi``/``c_hi``.  Equal costs go to the smallest
    row index.  ``ties`` and ``scratch`` (C-ordered, shape of ``Cb``) are overwritten.
    """
    n, m = ties.shape
    n_ties = int(np.count_nonzero(ties))
    if n_ties <= _DENSE_TIE_SHARE * n * m:
        rows, cols = np.nonzero(ties)
        costs = Cb[rows, cols]
        c_lo.fill(np.inf)
        np.minimum.at(c_lo, cols, costs)
        c_hi.fill(-np.inf)
        np.maximum.at(c_hi, cols, costs)
        for rows_out, extreme in ((lo, c_lo), (hi, c_hi)):
            hit = costs == extreme[cols]
            rows_out.fill(n)
            np.minimum.at(rows_out, cols[hit], rows[hit])
        return
    np.logical_not(ties, out=ties)  # now marks rows outside the argmax set
    np.copyto(scratch, Cb)
    np.copyto(scratch, np.inf, where=ties)
    ar = np.arange(m)
    lo[:] = scratch.argmin(axis=0)
    c_lo[:] = scratch[lo, ar]
    np.copyto(scratch, -np.inf, where=ties)
    hi[:] = scratch.argmax(axis=0)
    c_hi[:] = scratch[hi, ar]
