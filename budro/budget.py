"""The transport budget ``eps``: what one unit means, a unit comparable across tables, and checks.

One unit of ``eps``
    BuDRO's adversary moves the training distribution within fair-transport distance ``eps``:
    moving a share ``s`` of the points over a squared fair distance ``d`` each costs ``s * d``, and
    the mean cost over all points may not exceed ``eps``.  So ``eps`` is a *mean squared fair
    distance*, measured in the fair metric's embedding of the training table (for the default
    sensitive-subspace metric: the columns as the booster sees them, with the protected directions
    projected out; on a :class:`budro.tables.TableEncoder` table, its ``metric_matrix``:
    categoricals one-hot, missing values imputed, numerics standardised).  These are the
    ``eps_unit="raw"`` units, the default, and the units of the paper's configs.

A unit comparable across tables (``eps_unit="nn"``)
    ``eps`` is then a multiple of the table's *nearest-neighbour scale*: the median, over training
    points, of the squared fair distance from a point to its nearest *other distinct* point (points
    at fair distance 0 from it do not count).  ``eps = 1`` lets the adversary move every point about
    as far as its typical nearest distinct neighbour; ``eps = 0.1`` a tenth of that.  The scale is
    computed on a random sample of at most ``max_samples`` training points (default 500, seeded by
    the estimator's ``random_state``), each against *all* training points, and stored on the fitted
    model as ``eps_scale_`` (also under ``eps_unit="raw"``, for information); ``eps_effective_`` is
    the budget in squared fair distance that training used.

Checks before training (warnings, :class:`DegenerateFairMetricWarning` and :class:`LargeBudgetWarning`)
    * the fair metric is degenerate: at least 90% of all pairs of training points are at fair
      distance 0 (e.g. every direction of the data projected out), so the adversary moves mass
      between them for free and training degrades;
    * the budget lets the adversary relabel most of the data in round 0: with the points' squared
      fair distances ``d_i`` to their nearest point *with another label*, the largest share of
      points that can all be moved onto an opposite-label point within the mean budget (cheapest
      first, :meth:`BudgetDiagnosis.relabel_share`) covers at least 80% of the points that the
      adversary cannot already relabel for free (``d_i = 0``: a point with another label at fair
      distance 0, which any budget, even 0, lets it use).  The free share is left out because it
      does not depend on eps (COMPAS, with 133 distinct points in the fair embedding, has 97%), and
      the threshold is high because a large relabel share alone does not make training fail: the
      paper's synthetic demo (eps = 0.01) can relabel 98% and trains as intended (it is meant to
      erase what the protected direction explains).  ``docs/your-own-data.md`` lists the numbers on
      the paper's data sets next to the budgets that worked and failed.

:func:`diagnose_budget` returns these numbers (a :class:`BudgetDiagnosis`, stored on the fitted
estimator as ``budget_``); :meth:`BudgetDiagnosis.relabel_share` answers "how much of the data can
budget ``eps`` relabel?" before any training, and :meth:`BudgetDiagnosis.table` lists it for a few
budgets.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from budro.exceptions import BudroWarning, NumericalError, ValidationError

__all__ = [
    "EPS_UNITS",
    "BudgetDiagnosis",
    "DegenerateFairMetricWarning",
    "LargeBudgetWarning",
    "check_budget",
    "diagnose_budget",
    "effective_eps",
]

#: The units ``eps`` can be given in (``BuDROClassifier(eps_unit=...)``).
EPS_UNITS = ("raw", "nn")
#: Rows sampled for the diagnosis (each compared with every training row).
DEFAULT_MAX_SAMPLES = 500
#: Warn about a degenerate metric when at least this share of pairs is at fair distance 0.
DEGENERATE_SHARE = 0.9
#: Warn about a large budget when it can move at least this share of the points that are not
#: relabelled for free onto an opposite-label point.
RELABEL_SHARE = 0.8
#: Bytes of squared distances held at once.
_BLOCK_BYTES = 16 * 2**20
#: Bytes of a tile's squared distances (cache-sized: the whole-tile passes of the numpy path and
#: the GEMM's output stay in cache; 4.3 against 6.2 s for 16 MiB at 10^6 rows).
_TILE_BYTES = 2**20
#: The compiled tile reduction from this many compared pairs (500 sampled rows x 200 000 training
#: rows), where it saves more than numba's start costs.  Exact either way.
KERNEL_MIN_PAIRS = 10**8
#: Whether the compiled reduction may be used (tests switch it off to compare the two paths).
USE_KERNEL = True


class DegenerateFairMetricWarning(BudroWarning):
    """(Nearly) every pair of training points is at fair distance 0: the fair metric ignores
    (nearly) every direction of the data, so the transport adversary moves mass for free."""


class LargeBudgetWarning(BudroWarning):
    """The budget ``eps`` lets the adversary move most training points onto a point with another
    label in the first round: it can relabel most of the data."""


@dataclass(frozen=True)
class BudgetDiagnosis:
    """What the fair metric and the labels allow the adversary on one training table.

    Attributes
    ----------
    nn_scale : float
        Median squared fair distance from a (sampled) training point to its nearest other
        distinct training point: the unit of ``eps_unit="nn"``.  0 when no point has a distinct
        neighbour (a degenerate metric).
    zero_pair_share : float
        Share of pairs of training points (sampled point, any other point) at fair distance 0.
    opposite_distances : numpy array
        Sorted squared fair distances from each sampled point to its nearest training point with
        another label (``inf`` where there is none).
    n_rows, n_sampled : int
        Training rows, and rows sampled for the statistics.
    zero_tolerance : float
        Squared distances at or below this count as 0.
    """

    nn_scale: float
    zero_pair_share: float
    opposite_distances: np.ndarray
    n_rows: int
    n_sampled: int
    zero_tolerance: float

    @property
    def median_opposite(self) -> float:
        """Median squared fair distance to the nearest point with another label."""
        d = self.opposite_distances
        return float(np.median(d)) if d.size else math.nan

    def relabel_share(self, eps: float) -> float:
        """The largest share of points that budget ``eps`` (squared fair distance) can move, each
        onto its nearest point with another label, cheapest first: ``max k/m`` with
        ``sum(d_(1..k)) / m <= eps``."""
        d = self.opposite_distances
        if not d.size:
            return 0.0
        cumulative = np.cumsum(d) / d.size
        return float(np.searchsorted(cumulative, float(eps) * (1 + 1e-12), side="right") / d.size)

    @property
    def free_relabel_share(self) -> float:
        """Share of points with a point of another label at fair distance 0 (relabelled at any eps)."""
        return self.relabel_share(0.0)

    def paid_relabel_share(self, eps: float) -> float:
        """Of the points not relabelled for free, the share budget ``eps`` can also relabel."""
        free = self.free_relabel_share
        return 0.0 if free >= 1.0 else (self.relabel_share(eps) - free) / (1.0 - free)

    def eps_for_relabel_share(self, share: float) -> float:
        """The smallest budget that moves a share ``share`` of the points onto an opposite-label point."""
        d = self.opposite_distances
        k = int(math.ceil(float(share) * d.size))
        if k <= 0 or not d.size:
            return 0.0
        return float(np.sum(d[:k]) / d.size)

    def eps_for_paid_relabel_share(self, share: float) -> float:
        """The smallest budget whose :meth:`paid_relabel_share` reaches ``share``."""
        free = self.free_relabel_share
        return self.eps_for_relabel_share(free + float(share) * (1.0 - free))

    def table(self, eps_values: Sequence[float], *, unit: str = "raw") -> str:
        """A text table: budget, in squared fair distance, share of points it can relabel."""
        rows = [f"nearest-neighbour scale (eps_unit='nn' unit): {self.nn_scale:.4g} squared fair distance",
                f"pairs at fair distance 0: {100 * self.zero_pair_share:.1f}%",
                f"median squared distance to the nearest point with another label: {self.median_opposite:.4g}",
                f"points with another label at fair distance 0 (relabelled for free): {100 * self.free_relabel_share:.1f}%",
                "", f"{'eps (' + unit + ')':>12}  {'squared dist.':>13}  relabel share  of the rest"]
        for eps in eps_values:
            raw = effective_eps(eps, unit, self)
            rows.append(f"{eps:>12.4g}  {raw:>13.4g}  {100 * self.relabel_share(raw):12.1f}%"
                        f"  {100 * self.paid_relabel_share(raw):10.1f}%")
        return "\n".join(rows)

    def to_dict(self) -> dict[str, float]:
        return {"nn_scale": self.nn_scale, "zero_pair_share": self.zero_pair_share,
                "median_opposite": self.median_opposite, "free_relabel_share": self.free_relabel_share,
                "n_rows": self.n_rows, "n_sampled": self.n_sampled}


def diagnose_budget(metric: Any, X: Any, y: Any, *, max_samples: int | None = DEFAULT_MAX_SAMPLES,
                    random_state: Any = 0) -> BudgetDiagnosis:
    """Measure the nearest-neighbour scale, the zero-distance pairs and the opposite-label distances.

    Parameters
    ----------
    metric : fitted fair metric
        With ``embed`` (Mahalanobis metrics: computed on the centred embedding) or ``iter_pairwise``.
    X : array (n, d)
        The training rows, as the metric takes them.
    y : array (n,)
        Training labels.
    max_samples : int or None, default 500
        Sample at most this many rows (without replacement, ``random_state``); each is compared with
        every training row.  None: all rows (O(n^2)).
    random_state : None, int or numpy Generator
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y).reshape(-1)
    if X.ndim != 2 or y.shape[0] != X.shape[0]:
        raise ValidationError(f"diagnose_budget: X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    n = X.shape[0]
    if max_samples is not None and (isinstance(max_samples, bool) or not isinstance(max_samples, numbers.Integral)
                                    or max_samples < 1):
        raise ValidationError(f"max_samples must be an integer >= 1 or None, got {max_samples!r}")
    rng = np.random.default_rng(random_state)
    rows = np.arange(n) if max_samples is None or n <= max_samples else np.sort(rng.choice(n, max_samples, replace=False))
    m = rows.size

    # Features so large that squared distances overflow float64 (|x| around 1e155) are refused
    # here, before any distance is computed, with the NumericalError the solvers would give: the
    # user sees that one clear error, not numpy's overflow warnings first.
    from budro.transport import check_squared_norms

    with np.errstate(over="ignore", invalid="ignore"):
        Xc = X - X.mean(axis=0) if n else X
        input_norms = np.einsum("ij,ij->i", Xc, Xc)
    embed = getattr(metric, "embed", None)
    if callable(embed):
        Z = np.asarray(embed(X), dtype=float)
        with np.errstate(over="ignore", invalid="ignore"):
            Z = Z - Z.mean(axis=0) if n else Z
            norms = np.einsum("ij,ij->i", Z, Z)
        check_squared_norms(Z, norms, "the fair metric's embedding of the training rows (budget check)")
        typical_metric = 2.0 * float(norms.mean()) if n else 0.0
    else:
        # A metric known only through its distances: every block is checked for inf/NaN.
        def blocks():
            for start, stop, D in metric.iter_pairwise(X[rows], X, block_bytes=_BLOCK_BYTES):
                D = np.asarray(D, dtype=float)
                if not np.isfinite(D).all():
                    raise NumericalError(
                        f"diagnose_budget: the fair metric {type(metric).__name__} gives non-finite distances between "
                        f"training rows {int(rows[start])}.. and the others: standardise the features or rescale the metric"
                    )
                yield start, stop, D

        typical_metric = None
    with np.errstate(over="ignore", invalid="ignore"):
        typical_input = 2.0 * float(input_norms.mean()) if n else 0.0
    if not math.isfinite(typical_input):
        typical_input = float(np.finfo(np.float64).max)  # only the zero tolerance uses it

    nearest = np.full(m, np.inf)
    opposite = np.full(m, np.inf)
    zeros = 0
    if typical_metric is not None:  # an embedding: tiles of the training rows, grouped by label
        zeros = _scan_embedded(Z, norms, rows, y, nearest, opposite, _tolerance(typical_metric, typical_input))
    else:  # distances only: the tolerance needs the typical distance first, so every block is kept
        D_all = [D for _, _, D in blocks()]
        typical_metric = float(np.mean([D.mean() for D in D_all])) if D_all else 0.0
        start = 0
        for D in D_all:
            stop = start + D.shape[0]
            zeros += _reduce(D, start, stop, rows, y, nearest, opposite, _tolerance(typical_metric, typical_input))
            start = stop
    tol = _tolerance(typical_metric, typical_input)
    finite = nearest[np.isfinite(nearest)]
    return BudgetDiagnosis(
        nn_scale=float(np.median(finite)) if finite.size else 0.0,
        zero_pair_share=float(zeros / (m * (n - 1))) if n > 1 else 0.0,
        opposite_distances=np.sort(opposite),
        n_rows=n, n_sampled=m, zero_tolerance=tol,
    )


def _tolerance(typical_metric: float, typical_input: float) -> float:
    # distances of a few 1e-16 relative rounding are 0; a metric whose every distance is below
    # 1e-12 of the input's own squared distances is 0 everywhere
    return 1e-9 * typical_metric + 1e-12 * typical_input


def _scan_embedded(Z: np.ndarray, norms: np.ndarray, rows: np.ndarray, y: np.ndarray, nearest: np.ndarray,
                   opposite: np.ndarray, tol: float) -> int:
    """:func:`_reduce` over all training rows for the sampled ``rows`` of an embedding ``Z``
    (squared norms ``norms``): the same distances (``|z_r|^2 + |z_i|^2 - 2 z_r.z_i``, clipped at
    0) and the same minima and zero count, computed on tiles of training rows of one label each
    (the sampled rows against a few hundred training rows at a time, so that a tile's distances
    stay in cache), so that the embedding is read once and no label mask is formed
    (``benchmarks/budget_check.py``).  Where numba is installed and the scan compares at least
    :data:`KERNEL_MIN_PAIRS` pairs, each tile's distances are reduced in one compiled pass
    (:mod:`budro._budget_numba`, the same operations: the same result to the bit) on the cores
    this process may use, one span of tiles per thread."""
    n, m = Z.shape[0], rows.size
    if n == 0 or m == 0:
        return 0
    _, code = np.unique(y, return_inverse=True)
    code = code.reshape(-1)
    order = np.argsort(code, kind="stable")
    bounds = np.searchsorted(code[order], np.arange(int(code.max()) + 2))
    where = np.empty(n, dtype=np.intp)
    where[order] = np.arange(n)
    own = where[rows]  # each sampled row's own place in that order (not its own neighbour)
    Zs, ns, ys = Z[rows], norms[rows], code[rows]
    size = max(1, _TILE_BYTES // (8 * m))
    tiles = [(k, a, min(int(bounds[k + 1]), a + size))
             for k in range(bounds.size - 1) for a in range(int(bounds[k]), int(bounds[k + 1]), size)]
    kernel = _tile_kernel(n * m)
    if kernel is None:
        return _scan_tiles_numpy(Z, norms, order, own, Zs, ns, ys, tiles, nearest, opposite, tol)
    return _scan_tiles_compiled(kernel, Z, norms, order, own, Zs, ns, ys, tiles, nearest, opposite, tol)


def _tile_kernel(pairs: int):
    """:func:`budro._budget_numba.reduce_tile`, or None for the numpy passes."""
    if not USE_KERNEL or pairs < KERNEL_MIN_PAIRS:
        return None
    from budro.solvers import _sparse_kernels

    if not _sparse_kernels.available():
        return None
    from budro._budget_numba import reduce_tile

    return reduce_tile


def _scan_tiles_numpy(Z, norms, order, own, Zs, ns, ys, tiles, nearest, opposite, tol) -> int:
    zeros = 0
    zero_other = np.zeros(ys.size, dtype=bool)
    for k, a, b in tiles:
        other = ys != k
        idx = order[a:b]
        D = ns[:, None] + norms[idx][None, :] - 2.0 * (Zs @ Z[idx].T)
        np.maximum(D, 0.0, out=D)
        hit = np.flatnonzero((own >= a) & (own < b))
        D[hit, own[hit] - a] = np.inf
        zero = D <= tol
        count = int(np.count_nonzero(zero))
        if count:
            zeros += count
            zero_other |= other & zero.any(axis=1)
            np.copyto(D, np.inf, where=zero)
        low = D.min(axis=1)
        np.minimum(nearest, low, out=nearest)
        np.minimum(opposite, np.where(other, low, np.inf), out=opposite)
    opposite[zero_other] = 0.0
    return zeros


def _scan_tiles_compiled(kernel, Z, norms, order, own, Zs, ns, ys, tiles, nearest, opposite, tol) -> int:
    """The tiles in ``threads`` contiguous spans, each on its own Python thread with its own
    minima (single-threaded GEMMs, the kernel releases the GIL); the minima are combined after,
    which is exact (a minimum does not depend on the order)."""
    from budro._threads import available_cores, pool_limits

    threads = max(1, min(available_cores(), len(tiles)))
    cuts = np.linspace(0, len(tiles), threads + 1).round().astype(int)
    ys = np.ascontiguousarray(ys, dtype=np.intp)

    def run(lo: int, hi: int):
        near = np.full(ys.size, np.inf)
        opp = np.full(ys.size, np.inf)
        zero_other = np.zeros(ys.size, dtype=np.bool_)
        own_col = np.empty(ys.size, dtype=np.intp)
        zeros = 0
        for k, a, b in tiles[lo:hi]:
            idx = order[a:b]
            G = Zs @ Z[idx].T
            np.subtract(own, a, out=own_col)
            own_col[(own < a) | (own >= b)] = -1
            zeros += int(kernel(G, ns, norms[idx], own_col, ys, k, tol, near, opp, zero_other))
        return near, opp, zero_other, zeros

    with pool_limits(1, "blas"):
        if threads == 1:
            parts = [run(0, len(tiles))]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads) as pool:
                parts = list(pool.map(run, cuts[:-1].tolist(), cuts[1:].tolist()))
    zero_other = np.zeros(ys.size, dtype=bool)
    zeros = 0
    for near, opp, zo, z in parts:
        np.minimum(nearest, near, out=nearest)
        np.minimum(opposite, opp, out=opposite)
        zero_other |= zo
        zeros += z
    opposite[zero_other] = 0.0
    return zeros


def _reduce(D: np.ndarray, start: int, stop: int, rows: np.ndarray, y: np.ndarray, nearest: np.ndarray,
            opposite: np.ndarray, tol: float) -> int:
    local = np.arange(stop - start)
    D = D.copy()
    D[local, rows[start:stop]] = np.inf  # a point is not its own neighbour
    zero = D <= tol
    n_zero = int(zero.sum())
    other = y[None, :] != y[rows[start:stop], None]
    opposite[start:stop] = np.where(other, np.where(zero, 0.0, D), np.inf).min(axis=1)
    nearest[start:stop] = np.where(zero, np.inf, D).min(axis=1)
    return n_zero


def effective_eps(eps: float, eps_unit: str, diagnosis: BudgetDiagnosis | None) -> float:
    """``eps`` in squared fair distance: as given for ``"raw"``, times ``diagnosis.nn_scale`` for ``"nn"``."""
    check_eps_unit(eps_unit)
    if eps_unit == "raw":
        return float(eps)
    if diagnosis is None:
        raise ValidationError("eps_unit='nn' needs the nearest-neighbour scale of the training table")
    return float(eps) * diagnosis.nn_scale


def check_eps_unit(eps_unit: Any) -> str:
    if not isinstance(eps_unit, str) or eps_unit not in EPS_UNITS:
        raise ValidationError(
            f"eps_unit must be one of {', '.join(map(repr, EPS_UNITS))} (raw: squared fair distance; nn: multiples of "
            f"the median squared fair distance to the nearest distinct training point), got {eps_unit!r}"
        )
    return eps_unit


def check_budget(diagnosis: BudgetDiagnosis, eps: float, *, eps_given: float | None = None, eps_unit: str = "raw",
                 protected: Sequence[Any] | None = None, stacklevel: int = 2) -> list[str]:
    """Warn about a degenerate fair metric and a budget that relabels most of the data.

    ``eps`` is the budget in squared fair distance; ``eps_given`` and ``eps_unit`` are the budget as
    the user wrote it (a degenerate metric is reported whenever ``eps_given > 0``: with
    ``eps_unit="nn"`` it makes ``eps`` 0); ``protected`` only words the message.  Nothing is
    reported for ``eps_given = 0`` (plain boosting).  Returns the messages issued.
    """
    issued = []
    given = f"eps={eps:g}" if eps_given is None or eps_unit == "raw" else f"eps={eps_given:g} (eps_unit='nn': {eps:.4g})"
    asked = eps if eps_given is None else eps_given
    if asked > 0 and diagnosis.zero_pair_share >= DEGENERATE_SHARE:
        where = f" with protected={list(protected)!r}" if protected else ""
        message = (
            f"degenerate fair metric{where}: {100 * diagnosis.zero_pair_share:.1f}% of the pairs of training points are "
            "at fair distance 0, so the adversary moves mass between them (across labels) for free and training "
            "degrades; the metric ignores (nearly) every direction of the data. Protect fewer columns, or choose "
            "another fair metric or its parameters"
        )
        warnings.warn(message, DegenerateFairMetricWarning, stacklevel=stacklevel)
        issued.append(message)
    if eps > 0 and diagnosis.zero_pair_share < DEGENERATE_SHARE:
        paid = diagnosis.paid_relabel_share(eps)
        free = diagnosis.free_relabel_share
        if paid >= RELABEL_SHARE:
            also = f" ({100 * free:.0f}% have one at fair distance 0 and are relabelled at any eps)" if free > 0.005 else ""
            message = (
                f"{given} lets the adversary move {100 * diagnosis.relabel_share(eps):.0f}% of the training points onto "
                f"a point with another label in round 0{also}: it can relabel most of the data, and training may fit "
                f"the adversary's labels instead of the data's (median squared fair distance to the nearest point with "
                f"another label: {diagnosis.median_opposite:.4g}; eps_unit='nn' unit: {diagnosis.nn_scale:.4g}). "
                f"Budgets below {diagnosis.eps_for_paid_relabel_share(0.5):.4g} relabel at most half of the rest; "
                "compare balanced accuracy over a grid (budro experiment --grid eps=...)"
            )
            warnings.warn(message, LargeBudgetWarning, stacklevel=stacklevel)
            issued.append(message)
    return issued
