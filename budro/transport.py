"""The transport problem solved in every BuDRO round, its cost objects and its result type.

One boosting round asks (paper, eq. (4)) for a coupling ``Pi`` (n x n) with column sums ``1/n``
and budget ``<C, Pi> <= eps`` that maximises ``sum_ij Pi_ij * losses[i, labels[j]]``.  Point ``j``
(with its label ``y_j``) may be moved to any training input ``x_i`` at cost ``C_ij = d_x(x_i, x_j)^2``
while keeping its label.  The boosting weights are ``weights[i, k] = sum_{j: y_j = k} Pi_ij``.

Nothing here is specific to two labels, and nothing builds an n x n matrix unless the caller
hands one over (:class:`DenseCost`): :class:`EmbeddingCost` computes columns of ``C`` in blocks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from budro.exceptions import NumericalError, ValidationError

__all__ = [
    "Cost",
    "DenseCost",
    "EmbeddingCost",
    "NeighborCost",
    "TransportProblem",
    "TransportResult",
]

#: Default memory for one block of cost columns (bytes).
DEFAULT_BLOCK_BYTES = 32 * 2**20
#: :class:`EmbeddingCost` keeps the whole matrix in memory when it takes at most this many bytes.
DEFAULT_CACHE_BYTES = 256 * 2**20
#: Squared distances below ``ZERO_RTOL * (|z_i|^2 + |z_j|^2)`` are rounding noise and set to exactly 0.
ZERO_RTOL = 1e-12
#: Largest squared norm |z|^2 of an embedded point: ``|z_i - z_j|^2 <= 4 max|z|^2``, and the block
#: formula ``|z_i|^2 + |z_j|^2 - 2 z_i.z_j`` must not overflow float64 (max 1.8e308) either.
MAX_SQUARED_NORM = float(np.finfo(np.float64).max) / 16


class Cost:
    """Squared fair distances ``C_ij = d_x(x_i, x_j)^2`` between the n training points.

    Subclasses provide :meth:`column_block`; solvers never ask for more than one block at a time
    unless :attr:`is_dense` says the whole matrix is already in memory.
    """

    n: int

    #: True when the full matrix is held in memory (``column_block(0, n)`` is free).
    is_dense: bool = False
    #: True when only listed pairs are allowed (:class:`NeighborCost`); every other pair costs +inf.
    is_sparse: bool = False

    def column_block(self, start: int, stop: int) -> np.ndarray:
        """Columns ``start:stop`` of C as a float64 array of shape (n, stop - start)."""
        raise NotImplementedError

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``C[rows[k], cols[k]]`` for each k, without forming C."""
        raise NotImplementedError

    def block_size(self, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
        """How many columns fit in one block of ``block_bytes`` (at least 1)."""
        if self.is_dense:
            return max(self.n, 1)
        return int(max(1, min(self.n, block_bytes // max(8 * self.n, 1))))

    def iter_blocks(self, block_bytes: int = DEFAULT_BLOCK_BYTES) -> Iterator[tuple[int, int, np.ndarray]]:
        """Yield ``(start, stop, C[:, start:stop])`` covering every column once."""
        b = self.block_size(block_bytes)
        for start in range(0, self.n, b):
            stop = min(self.n, start + b)
            yield start, stop, self.column_block(start, stop)

    def max(self) -> float:
        """The largest entry of C."""
        return max((float(block.max()) for _, _, block in self.iter_blocks()), default=0.0)


class DenseCost(Cost):
    """An explicit (n, n) matrix of squared fair distances.

    The matrix must be finite and non-negative with a zero diagonal (staying put is free, so a
    plan that moves nothing is always feasible).
    """

    is_dense = True

    def __init__(self, C: Any):
        C = _as_float_array(C, "C")
        if C.ndim != 2 or C.shape[0] != C.shape[1]:
            raise ValidationError(f"DenseCost: C must be a square (n, n) matrix, got shape {C.shape}")
        if C.size and C.min() < 0:
            raise ValidationError(f"DenseCost: C must be non-negative (squared distances); its minimum is {C.min():g}")
        if C.size and np.any(np.diagonal(C) != 0):
            bad = int(np.flatnonzero(np.diagonal(C) != 0)[0])
            raise ValidationError(
                f"DenseCost: C must have a zero diagonal (C[j, j] = d(x_j, x_j)^2 = 0); C[{bad}, {bad}] = {C[bad, bad]:g}"
            )
        self.C = C
        self.n = C.shape[0]

    def column_block(self, start: int, stop: int) -> np.ndarray:
        return self.C[:, start:stop]

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return self.C[np.asarray(rows), np.asarray(cols)]

    def max(self) -> float:
        return float(self.C.max()) if self.C.size else 0.0

    def __repr__(self) -> str:
        return f"DenseCost(n={self.n})"


class EmbeddingCost(Cost):
    """``C_ij = ||z_i - z_j||^2`` for an embedding ``Z`` (n, p) of the points in the fair metric.

    Columns are computed in blocks with a matrix product; the full matrix is cached only when it
    takes at most ``cache_bytes`` (default 256 MiB, about n = 5800).  Rounding noise around zero
    (duplicate points give +-1e-15 instead of 0) is snapped to exactly 0, so duplicates are free
    to move between.
    """

    def __init__(self, Z: Any, *, cache_bytes: int = DEFAULT_CACHE_BYTES):
        Z = _as_float_array(Z, "Z")
        if Z.ndim != 2:
            raise ValidationError(f"EmbeddingCost: Z must be 2-D (n points, p coordinates), got shape {Z.shape}")
        self.Z = np.ascontiguousarray(Z)
        self.n = Z.shape[0]
        with np.errstate(over="ignore"):
            self._sq = np.einsum("ij,ij->i", self.Z, self.Z)
        check_squared_norms(self.Z, self._sq, "EmbeddingCost")
        self._full: np.ndarray | None = None
        if 8 * self.n * self.n <= cache_bytes:
            self._full = self._compute(0, self.n)
            self.is_dense = True

    def _compute(self, start: int, stop: int) -> np.ndarray:
        Zb = self.Z[start:stop]
        sq_b = self._sq[start:stop]
        scale = self._sq[:, None] + sq_b[None, :]
        C = scale - 2.0 * (self.Z @ Zb.T)
        C[C <= ZERO_RTOL * scale] = 0.0
        if start < self.n and stop > start:  # the diagonal is exactly zero
            idx = np.arange(start, stop)
            C[idx, idx - start] = 0.0
        return C

    def column_block(self, start: int, stop: int) -> np.ndarray:
        if self._full is not None:
            return self._full[:, start:stop]
        return self._compute(start, stop)

    def distinct_points(self) -> tuple[np.ndarray, np.ndarray]:
        """Points with identical embeddings (bit for bit), which cost exactly the same to every
        other point: ``(first, group)``, the first row of each distinct embedding (groups numbered
        in order of their first row) and each row's group.  Computed once and kept."""
        found = getattr(self, "_distinct", None)
        if found is None:
            _, first, inverse = np.unique(self.Z, axis=0, return_index=True, return_inverse=True)
            rank = np.argsort(first)
            relabel = np.empty_like(rank)
            relabel[rank] = np.arange(rank.size)
            found = self._distinct = (first[rank], relabel[inverse.reshape(-1)])
        return found

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        if self._full is not None:
            return self._full[rows, cols]
        # The same formula and zero-snapping as column_block, so a plan's cost is computed
        # exactly as the solver saw it.
        scale = self._sq[rows] + self._sq[cols]
        c = scale - 2.0 * np.einsum("ij,ij->i", self.Z[rows], self.Z[cols])
        c[(c <= ZERO_RTOL * scale) | (rows == cols)] = 0.0
        return c

    def max(self) -> float:
        if self._full is not None:
            return float(self._full.max()) if self._full.size else 0.0
        return super().max()

    def __repr__(self) -> str:
        return f"EmbeddingCost(n={self.n}, p={self.Z.shape[1]}, cached={self._full is not None})"


class NeighborCost(Cost):
    """A sparse cost: column j (the point that moves) may only go to its m nearest neighbours in
    the fair metric, itself included, so staying put is always possible; every other pair costs +inf.

    The neighbour graph is found once per fit with a real nearest-neighbour library
    (scikit-learn's ``NearestNeighbors``, or faiss's exact flat index with ``method="faiss"`` when
    faiss is installed) and reused every round: O(n m) memory, and O(n m) work per solve.  The
    costs of listed pairs are recomputed exactly from the embedding (duplicates cost exactly 0).
    scikit-learn chooses its own algorithm up to 50 000 points (brute force when p > 15) and
    uses a k-d tree above that, where brute force would be O(n^2 p).

    Attributes
    ----------
    neighbors : (n, m) int array
        ``neighbors[j]`` are the rows i that column j may move to; ``neighbors[j, 0] == j``.
    neighbor_costs : (n, m) float64 array
        ``neighbor_costs[j, r] = C[neighbors[j, r], j]``, sorted increasingly after position 0.
    """

    is_sparse = True

    def __init__(self, Z: Any, m: int, *, method: str = "sklearn", n_jobs: int | None = None):
        Z = _as_float_array(Z, "Z")
        if Z.ndim != 2:
            raise ValidationError(f"NeighborCost: Z must be 2-D (n points, p coordinates), got shape {Z.shape}")
        n = Z.shape[0]
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValidationError(f"NeighborCost: m must be an integer >= 1, got {m!r}")
        if method not in _NEIGHBOR_METHODS:
            raise ValidationError(f"NeighborCost: method must be one of: {', '.join(_NEIGHBOR_METHODS)}; got {method!r}")
        m = int(min(m, n))
        self.n = n
        self.m = m
        self.Z = np.ascontiguousarray(Z)
        with np.errstate(over="ignore"):
            check_squared_norms(self.Z, np.einsum("ij,ij->i", self.Z, self.Z), "NeighborCost")
        idx = _NEIGHBOR_METHODS[method](self.Z, m, n_jobs)
        # Each list starts with the point itself (ties among duplicates may have pushed it out),
        # followed by the first m - 1 other neighbours, by increasing exact cost.
        own = np.arange(n)
        not_self = idx != own[:, None]
        others = np.take_along_axis(idx, np.argsort(~not_self, axis=1, kind="stable"), axis=1)[:, : m - 1]
        # Exact squared distances of the listed pairs, in row blocks (an (n, m, p) difference
        # array would take 2.3 GB at n = 10^6, m = 16, p = 19).
        costs = np.empty(others.shape)
        block = max(1, (64 << 20) // max(1, 8 * others.shape[1] * self.Z.shape[1]))
        for start in range(0, n, block):
            stop = min(n, start + block)
            d = self.Z[others[start:stop]] - self.Z[start:stop, None, :]
            np.einsum("ijk,ijk->ij", d, d, out=costs[start:stop])
        order = np.argsort(costs, axis=1, kind="stable")
        self.neighbors = np.column_stack([own, np.take_along_axis(others, order, axis=1)]).astype(np.intp)
        self.neighbor_costs = np.column_stack([np.zeros(n), np.take_along_axis(costs, order, axis=1)])

    @classmethod
    def from_lists(cls, neighbors: Any, neighbor_costs: Any) -> "NeighborCost":
        """A sparse cost from explicit lists (``neighbors[j, 0]`` must be j, with cost 0)."""
        nb = np.asarray(neighbors)
        c = _as_float_array(neighbor_costs, "neighbor_costs")
        if nb.ndim != 2 or c.shape != nb.shape or nb.dtype.kind not in "iu":
            raise ValidationError("NeighborCost.from_lists: neighbors (integers) and neighbor_costs must be (n, m) arrays of the same shape")
        n = nb.shape[0]
        if np.any(nb < 0) or np.any(nb >= n) or np.any(nb[:, 0] != np.arange(n)) or np.any(c[:, 0] != 0) or np.any(c < 0):
            raise ValidationError("NeighborCost.from_lists: each list must start with the point itself at cost 0, with rows in [0, n) and costs >= 0")
        self = cls.__new__(cls)
        self.n, self.m = n, nb.shape[1]
        self.Z = None
        self.neighbors = nb.astype(np.intp)
        self.neighbor_costs = c
        return self

    @property
    def radius(self) -> np.ndarray:
        """Per column, the largest listed cost: any unlisted row costs at least this (exact graphs)."""
        return self.neighbor_costs.max(axis=1)

    def column_block(self, start: int, stop: int) -> np.ndarray:
        """Columns of C with +inf for unlisted pairs (O(n) per column; for small checks only)."""
        out = np.full((self.n, stop - start), np.inf)
        cols = np.arange(start, stop)
        out[self.neighbors[start:stop], (cols - start)[:, None]] = self.neighbor_costs[start:stop]
        return out

    def entries(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        hit = self.neighbors[cols] == rows[:, None]
        found = hit.any(axis=1)
        out = np.where(found, np.where(hit, self.neighbor_costs[cols], 0.0).sum(axis=1), np.inf)
        return out

    def max(self) -> float:
        return float(self.neighbor_costs.max()) if self.neighbor_costs.size else 0.0

    def __repr__(self) -> str:
        return f"NeighborCost(n={self.n}, m={self.m})"


#: Above this many points scikit-learn's "auto" choice (brute force whenever p > 15) is O(n^2 p)
#: work; a k-d tree is used instead (fast where the data have a low intrinsic dimension, as
#: tabular data usually do; faiss, method="faiss", is the alternative otherwise).
_BRUTE_FORCE_MAX_N = 50_000


def _sklearn_neighbors(Z: np.ndarray, m: int, n_jobs: int | None) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    algorithm = "auto" if Z.shape[0] <= _BRUTE_FORCE_MAX_N else "kd_tree"
    nn = NearestNeighbors(n_neighbors=m, algorithm=algorithm, n_jobs=n_jobs).fit(Z)
    return nn.kneighbors(Z, return_distance=False)


def _faiss_neighbors(Z: np.ndarray, m: int, n_jobs: int | None) -> np.ndarray:
    try:
        import faiss
    except ImportError:
        raise ValidationError("NeighborCost: method='faiss' needs the faiss package (pip install faiss-cpu)") from None
    index = faiss.IndexFlatL2(Z.shape[1])
    Zf = np.ascontiguousarray(Z, dtype=np.float32)
    index.add(Zf)
    _, idx = index.search(Zf, m)
    return idx.astype(np.intp)


_NEIGHBOR_METHODS = {"sklearn": _sklearn_neighbors, "faiss": _faiss_neighbors}


@dataclass(frozen=True, eq=False)
class TransportProblem:
    """One round's transport problem.

    Parameters
    ----------
    losses : array (n, K)
        ``losses[i, k]`` = loss of the current model at ``x_i`` under label ``k``.
    labels : array (n,)
        Integer labels in ``[0, K)``.
    cost : Cost
        Squared fair distances between the n points (e.g. :class:`DenseCost`).
    eps : float
        Transport budget, ``eps >= 0``.
    """

    losses: np.ndarray
    labels: np.ndarray
    cost: Cost
    eps: float

    def __post_init__(self) -> None:
        losses = _as_float_array(self.losses, "losses")
        if losses.ndim != 2 or losses.shape[1] < 1:
            raise ValidationError(f"TransportProblem: losses must have shape (n, K) with K >= 1, got {losses.shape}")
        n, K = losses.shape
        if n < 1:
            raise ValidationError("TransportProblem: losses must have at least one row (n >= 1)")
        labels = np.asarray(self.labels)
        if labels.shape != (n,):
            raise ValidationError(f"TransportProblem: labels must have shape ({n},) to match losses, got {labels.shape}")
        if labels.dtype.kind == "f":
            if not np.all(np.isfinite(labels)) or np.any(labels != np.round(labels)):
                raise ValidationError("TransportProblem: labels must be integers in [0, K)")
        elif labels.dtype.kind not in "iub":
            raise ValidationError(f"TransportProblem: labels must be integers in [0, K), got dtype {labels.dtype}")
        labels = labels.astype(np.intp)
        if labels.min() < 0 or labels.max() >= K:
            raise ValidationError(
                f"TransportProblem: labels must lie in [0, {K}) (K = losses.shape[1]); got values in "
                f"[{labels.min()}, {labels.max()}]"
            )
        if not isinstance(self.cost, Cost):
            raise ValidationError(
                f"TransportProblem: cost must be a budro Cost (DenseCost, EmbeddingCost, ...), got {type(self.cost).__name__}"
            )
        if self.cost.n != n:
            raise ValidationError(f"TransportProblem: cost is for {self.cost.n} points but losses has {n} rows")
        try:
            eps = float(self.eps)
        except (TypeError, ValueError):
            raise ValidationError(f"TransportProblem: eps must be a number >= 0, got {self.eps!r}") from None
        if not math.isfinite(eps) or eps < 0:
            raise ValidationError(f"TransportProblem: eps must be a finite number >= 0, got {self.eps!r}")
        object.__setattr__(self, "losses", losses)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "eps", eps)

    @property
    def n(self) -> int:
        return self.losses.shape[0]

    @property
    def n_labels(self) -> int:
        return self.losses.shape[1]

    @property
    def label_shares(self) -> np.ndarray:
        """Share of each label among the points: the label marginals of any feasible plan."""
        return np.bincount(self.labels, minlength=self.n_labels) / self.n

    def column_losses(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """``R[:, start:stop]`` with ``R_ij = losses[i, labels[j]]`` (n, stop - start)."""
        return self.losses[:, self.labels[start:stop]]

    def empirical_weights(self) -> np.ndarray:
        """The weights of the plan that moves nothing (``Pi = I / n``)."""
        w = np.zeros_like(self.losses)
        w[np.arange(self.n), self.labels] = 1.0 / self.n
        return w

    def __repr__(self) -> str:
        return f"TransportProblem(n={self.n}, K={self.n_labels}, eps={self.eps:g}, cost={self.cost!r})"


@dataclass(frozen=True, eq=False)
class TransportResult:
    """What every solver returns (one type for all solvers).

    Attributes
    ----------
    weights : (n, K) array
        ``weights[i, k] = P(x_i, k) = sum_{j: y_j = k} Pi_ij``; non-negative, summing to 1.
    objective : float
        ``sum_ij Pi_ij losses[i, y_j]`` (the robust loss of the current model).
    transport_cost : float
        ``<C, Pi>``.
    eta : float
        The dual variable of the budget constraint, NaN where a solver has none.
    plan : scipy.sparse array (n, n) or None
        The coupling, where the solver keeps it (sparse: exact solvers move at most n + 1 entries).
    dual_objective : float
        The dual value at ``eta`` where known (an upper bound on the optimum), else NaN.
    n_iter : int
        Iterations (dual evaluations, SGD steps, ...) the solver used.
    converged : bool
        Whether the solver met its own stopping rule.
    solver : str
        Name of the solver that produced it.
    info : dict
        Solver-specific extras.
    """

    weights: np.ndarray
    objective: float
    transport_cost: float
    eta: float = math.nan
    plan: Any = None
    dual_objective: float = math.nan
    n_iter: int = 0
    converged: bool = True
    solver: str = ""
    info: dict = field(default_factory=dict)

    @classmethod
    def from_plan(cls, problem: TransportProblem, plan: Any, **kwargs: Any) -> "TransportResult":
        """Build a result from a coupling (dense array or scipy sparse), computing weights, objective and cost."""
        P = sp.coo_array(plan)
        rows, cols, vals = P.row, P.col, P.data
        keep = vals != 0
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
        n, K = problem.n, problem.n_labels
        weights = np.zeros((n, K))
        np.add.at(weights, (rows, problem.labels[cols]), vals)
        objective = float(np.sum(vals * problem.losses[rows, problem.labels[cols]]))
        transport_cost = float(np.sum(vals * problem.cost.entries(rows, cols))) if vals.size else 0.0
        csr = sp.csr_array((vals, (rows, cols)), shape=(n, n))
        return cls(weights=weights, objective=objective, transport_cost=transport_cost, plan=csr, **kwargs)

    @property
    def gap(self) -> float:
        """How far :attr:`objective` may lie below the optimum, as far as the solver can tell:
        ``info["gap"]`` or ``info["gap_bound"]`` where the solver certifies one, else
        ``dual_objective - objective``; NaN when unknown."""
        for key in ("gap", "gap_bound"):
            value = self.info.get(key) if isinstance(self.info, dict) else None
            if isinstance(value, (int, float, np.floating)) and math.isfinite(float(value)):
                return max(0.0, float(value))
        if math.isfinite(self.dual_objective) and math.isfinite(self.objective):
            return max(0.0, float(self.dual_objective - self.objective))
        return math.nan

    @property
    def robust_loss(self) -> float:
        """Alias of :attr:`objective`: the restricted adversarial loss L(f) at this round."""
        return self.objective


def check_squared_norms(Z: np.ndarray, sq: np.ndarray, owner: str) -> None:
    """Raise :class:`~budro.exceptions.NumericalError` when the squared fair distances of the
    embedding ``Z`` (squared row norms ``sq``) would overflow float64 (inf, then NaN costs)."""
    top = float(sq.max()) if sq.size else 0.0
    if math.isfinite(top) and top <= MAX_SQUARED_NORM:
        return
    big = float(np.abs(Z).max())
    raise NumericalError(
        f"{owner}: fair-embedding values up to {big:.3g} overflow the squared fair distance (|z_i|^2 reaches "
        f"{top:.3g}; float64 ends at 1.8e308, so the costs would be inf/NaN): standardise the features (e.g. "
        f"scikit-learn's StandardScaler) or rescale the fair metric"
    )


def _as_float_array(a: Any, name: str) -> np.ndarray:
    try:
        arr = np.asarray(a, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{name} must be a numeric array: {exc}") from None
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise NumericalError(f"{name} contains {bad} NaN or infinite value(s){_CAUSES.get(name, '')}")
    return arr


#: The likely cause of non-finite values, by the array's name.
_CAUSES = {
    "Z": ": the fair metric produced them from the features (check the features for NaN/inf or huge values, "
         "and standardise them)",
    "losses": ": the model's losses overflowed (a diverging booster or huge features: lower the learning rate, "
              "standardise the features)",
    "C": ": a cost matrix must hold finite squared distances (standardise the features if they overflowed)",
    "neighbor_costs": ": listed costs must be finite squared distances",
}
