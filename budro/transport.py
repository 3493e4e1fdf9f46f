"""The transport problem solved in every BuDRO round, its cost objects and its result type.

One boosting round asks (paper, eq. (4)) for a coupling ``Pi`` (n x n) with column sums ``1/n``
and budget ``<C, Pi> <= eps`` that maximises ``sum_ij Pi_ij * losses[i, labels[j]]``.  Point ``j``
(with its label ``y_j``) may be moved to any training input ``x_i`` at cost ``C_ij = d_x(x_i, x_j)^2``
while keeping its label.  The boosting weights are ``weights[i, k] = sum_{j: y_j = k} Pi_ij``.

Nothing here is specific to two labels, and nothing builds an n x n matrix unless the caller
hands one over (:class:`DenseCost`): :class:`EmbeddingCost` computes columns of ``C`` in blocks.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import scipy.sparse as sp

from budro._threads import pool_limits, run_spans
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
    takes at most ``cache_bytes`` (default 256 MiB, about n = 5800), computed on first use (a
    solver that needs only the distinct points' costs, :meth:`costs_among`, never builds it).
    Rounding noise around zero
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
        self._hold = 8 * self.n * self.n <= cache_bytes
        if self._hold:
            self.is_dense = True

    def _matrix(self) -> np.ndarray | None:
        """The held matrix (computed on first use), or None for a blocked cost."""
        if self._full is None and getattr(self, "_hold", False):
            self._full = self._compute(0, self.n)
        return self._full

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
        full = self._matrix()
        if full is not None:
            return full[:, start:stop]
        return self._compute(start, stop)

    def costs_among(self, rows: np.ndarray) -> np.ndarray:
        """``C[rows][:, rows]`` (the held matrix's entries where it has been built, else the same
        formula and zero-snapping on these rows only)."""
        rows = np.asarray(rows, dtype=np.intp)
        if self._full is not None:
            return self._full[np.ix_(rows, rows)]
        sq = self._sq[rows]
        Zr = self.Z[rows]
        # scale - 2 (Zr Zr^T) and the zero-snapping, operation by operation as _compute does,
        # in two (r, r) arrays instead of four (each a fresh array's page faults: German's
        # 800 x 800, 2350 faults of 8.6 ms in a fit against about 1250)
        C = Zr @ Zr.T
        C *= 2.0
        scale = np.add(sq[:, None], sq[None, :])
        np.subtract(scale, C, out=C)
        scale *= ZERO_RTOL
        C[C <= scale] = 0.0
        np.fill_diagonal(C, 0.0)
        return C

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
        full = self._matrix()
        if full is not None:
            return full[rows, cols]
        # The same formula and zero-snapping as column_block, so a plan's cost is computed
        # exactly as the solver saw it.
        scale = self._sq[rows] + self._sq[cols]
        c = scale - 2.0 * np.einsum("ij,ij->i", self.Z[rows], self.Z[cols])
        c[(c <= ZERO_RTOL * scale) | (rows == cols)] = 0.0
        return c

    def max(self) -> float:
        full = self._matrix()
        if full is not None:
            return float(full.max()) if full.size else 0.0
        return super().max()

    def __repr__(self) -> str:
        return f"EmbeddingCost(n={self.n}, p={self.Z.shape[1]}, cached={bool(getattr(self, '_hold', False))})"


class NeighborCost(Cost):
    """A sparse cost: column j (the point that moves) may only go to its m nearest neighbours in
    the fair metric, itself included, so staying put is always possible; every other pair costs +inf.

    The neighbour graph is found once per fit with a nearest-neighbour library and reused every
    round: O(n m) memory, and O(n m) work per solve.  The costs of listed pairs are recomputed
    exactly (float64) from the embedding, so duplicates cost exactly 0 and each list is sorted by
    exact cost whatever the library computed.

    What is exact and what is not: the transport solve on a NeighborCost is exact for the lists it
    is given.  With an exact search (``method="exact"``, ``"sklearn"``) the lists are the m nearest
    points (ties between equally distant points broken by the library; by row order in budro's
    compiled brute force).  With an approximate
    search (``"faiss-ivf"``, ``"faiss-hnsw"``) a list may miss a few of the true m nearest points
    and hold the next ones instead: that changes the restricted problem (the adversary may move a
    point to slightly different places), not the exactness of its solution.  How much it changes
    is measured in docs/neighbors-benchmark.md (recall and the adversary's objective, approximate
    against exact lists).  The approximate searches are deterministic: the same lists on every run
    and for every thread count.

    Parameters
    ----------
    Z : array (n, p)
        The points embedded in the fair metric (``C_ij = |z_i - z_j|^2``).
    m : int
        List length, the point itself included (at most n).
    method : str, default "auto"
        ``"exact"``: brute force up to :data:`EXACT_BRUTE_MAX_N` points (scikit-learn's; from
        :data:`KNN_KERNEL_MIN_PAIRS` compared pairs on, budro's compiled search where numba is
        installed: float32 products of the centred points, the candidates their rounding could
        hide kept by a certified bound, exact float64 costs, so the same m nearest); above,
        scipy's k-d tree (``cKDTree``) on the principal axes of ``Z`` (an exact rotation: the
        tree's cells follow the directions the data spread along), queried in the tree's order,
        unless the data's dimension at the neighbours' scale (Levina and Bickel's estimate on
        :data:`DIMENSION_SAMPLE` seeded points) exceeds :data:`KD_TREE_MAX_DIM`, or a cost model
        of both searches on the data (the points a tree query examines, counted on seeded
        queries; no timing) expects brute force to be faster, where brute force is used.  ``"faiss-ivf"``: faiss's inverted-file index (k-means cells of about
        :data:`IVF_POINTS_PER_CELL` points, the :data:`IVF_NPROBE` nearest cells searched),
        approximate.  ``"faiss-hnsw"``: faiss's HNSW graph, approximate, built on one thread (a
        graph built on several depends on their timing), slow to build.  ``"auto"``: as
        ``"exact"``, except that above :data:`APPROX_MIN_N` points whose dimension exceeds
        :data:`APPROX_MIN_DIM` (where the k-d tree slows down) it uses ``"faiss-ivf"`` when faiss
        is installed (``pip install budro[neighbors]``).  ``"sklearn"``: scikit-learn's
        ``NearestNeighbors`` (brute force up to 50 000 points, its k-d tree above); ``"faiss"``:
        faiss's exact flat index in float32.
    n_jobs : int, optional
        Threads of the search; None or -1: :func:`budro._threads.available_cores`.
    dedupe : bool or "auto", default "auto"
        Search the distinct points only and give copies of a point the same list (exactly what a
        search over all points gives, ties among copies broken by row order); ``"auto"`` does it
        when at most :data:`DEDUPE_MAX_SHARE` of the rows are distinct.

    Attributes
    ----------
    neighbors : (n, m) int array
        ``neighbors[j]`` are the rows i that column j may move to; ``neighbors[j, 0] == j``.
    neighbor_costs : (n, m) float64 array
        ``neighbor_costs[j, r] = C[neighbors[j, r], j]``, sorted increasingly after position 0.
    method : str
        The search actually used (``"auto"`` resolved).
    n_distinct : int
        Number of distinct points searched (n when not deduplicated).
    """

    is_sparse = True

    def __init__(self, Z: Any, m: int, *, method: str = "auto", n_jobs: int | None = None,
                 dedupe: bool | str = "auto"):
        Z = _as_float_array(Z, "Z")
        if Z.ndim != 2:
            raise ValidationError(f"NeighborCost: Z must be 2-D (n points, p coordinates), got shape {Z.shape}")
        n = Z.shape[0]
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValidationError(f"NeighborCost: m must be an integer >= 1, got {m!r}")
        if method not in _NEIGHBOR_METHODS and method != "auto":
            raise ValidationError(
                f"NeighborCost: method must be one of: auto, {', '.join(_NEIGHBOR_METHODS)}; got {method!r}"
            )
        if dedupe not in (True, False, "auto"):
            raise ValidationError(f"NeighborCost: dedupe must be True, False or 'auto', got {dedupe!r}")
        if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer))
                                   or (n_jobs < 1 and n_jobs != -1)):
            raise ValidationError(f"NeighborCost: n_jobs must be a positive integer, -1 or None, got {n_jobs!r}")
        m = int(min(m, n))
        self.n = n
        self.m = m
        self.method = method
        self.Z = np.ascontiguousarray(Z)
        with np.errstate(over="ignore"):
            check_squared_norms(self.Z, np.einsum("ij,ij->i", self.Z, self.Z), "NeighborCost")
        from budro._threads import available_cores, limit_threads

        threads = available_cores() if n_jobs is None or n_jobs == -1 else int(n_jobs)
        groups = _distinct_rows(self.Z, dedupe)
        with limit_threads(threads):
            if groups is None:
                self.n_distinct = n
                idx, self.method = _search(method, self.Z, m, threads)
            else:
                first, inverse, counts = groups
                self.n_distinct = len(first)
                k = min(m, len(first))
                idx_distinct, self.method = _search(method, self.Z[first], k, threads)
                idx = _expand_copies(idx_distinct, inverse, counts, m)[inverse]
            self._finish(idx, threads)

    def _finish(self, idx: np.ndarray, threads: int = 1) -> None:
        n, m = self.n, self.m
        self.neighbors = np.empty((n, m), dtype=np.intp)
        self.neighbor_costs = np.empty((n, m))
        kernel = _finish_kernel(n * m)
        if kernel is not None:
            idx = np.ascontiguousarray(idx, dtype=np.intp)
            run_spans(lambda s0, s1: kernel(self.Z, idx, s0, s1, self.neighbors, self.neighbor_costs), n,
                       FINISH_CHUNK, threads)
            return
        # Each list starts with the point itself (ties among duplicates may have pushed it out),
        # followed by the first m - 1 other neighbours, by increasing exact cost.  Exact squared
        # distances of the listed pairs; in row blocks, written into the final arrays (whole
        # (n, m) temporaries would take several times the lists' memory).
        self.neighbors[:, 0] = np.arange(n)
        self.neighbor_costs[:, 0] = 0.0
        columns = np.ascontiguousarray(self.Z.T)  # each coordinate contiguous, gathered per block
        block = max(1, (16 << 20) // max(1, 8 * max(m - 1, 1)))
        for start in range(0, n, block):
            stop = min(n, start + block)
            part = idx[start:stop]
            not_self = part != np.arange(start, stop)[:, None]
            others = np.take_along_axis(part, np.argsort(~not_self, axis=1, kind="stable"), axis=1)[:, : m - 1]
            # summed coordinate by coordinate, in order: the compiled kernel's exact arithmetic
            costs = np.zeros(others.shape)
            for zk in columns:
                dk = zk[others] - zk[start:stop, None]
                costs += dk * dk
            order = np.argsort(costs, axis=1, kind="stable")
            self.neighbors[start:stop, 1:] = np.take_along_axis(others, order, axis=1)
            self.neighbor_costs[start:stop, 1:] = np.take_along_axis(costs, order, axis=1)

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
        self.method, self.n_distinct = "given", n
        self.Z = None
        self.neighbors = nb.astype(np.intp, copy=False)
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
#: tabular data usually do).
_BRUTE_FORCE_MAX_N = 50_000
#: ``method="exact"`` uses brute force up to this many points, scipy's k-d tree above (where the
#: data's dimension allows: :data:`KD_TREE_MAX_DIM`).
EXACT_BRUTE_MAX_N = 10_000
#: ``method="auto"`` uses faiss's IVF index (when installed) above this many points, when the
#: data's dimension at the neighbours' scale exceeds :data:`APPROX_MIN_DIM` (measured: at 2 x 10^5
#: points of dimension 7.9 the k-d tree took 19.8 s, IVF 4.6 s; at 10^6 points of dimension 5.4,
#: 14.9 s against 27.1 s; docs/neighbors-benchmark.md).
APPROX_MIN_N = 50_000
APPROX_MIN_DIM = 6.5
#: Above this estimated dimension of the data at the scale of the neighbours (Levina-Bickel, on
#: :data:`DIMENSION_SAMPLE` points) the k-d tree is little faster than brute force: ``"exact"``
#: uses brute force, ``"auto"`` faiss's IVF index when installed.
KD_TREE_MAX_DIM = 12.0
DIMENSION_SAMPLE = 256
#: Cost model of ``"exact"`` above EXACT_BRUTE_MAX_N points (:func:`_brute_force_cheaper`), in
#: nanoseconds of one thread, measured on this project's 2-core machines
#: (``benchmarks/neighbor_choice.py``): brute force per pair, and per pair and coordinate; the k-d
#: tree per examined point at 19 coordinates, and the power of p / 19 that it grows with.  Only
#: their ratios matter.  Brute force is not considered where the model gives it more than
#: BRUTE_MAX_SECONDS of one thread (an error of the model then costs at most that); the examined
#: points are counted for EXAMINED_SAMPLE queries.
BRUTE_NS_PER_PAIR, BRUTE_NS_PER_PAIR_DIM = 3.6, 0.02
TREE_NS_PER_POINT, TREE_DIM_POWER = 52.0, 2.5
BRUTE_MAX_SECONDS = 60.0
EXAMINED_SAMPLE = 64
#: The first EXAMINED_FIRST of them decide alone where one estimate exceeds the other EXAMINED_SETTLES times.
EXAMINED_FIRST, EXAMINED_SETTLES = 16, 2.0
EXAMINED_CHUNK = 1 << 18
#: NeighborCost's lists are finished by a compiled kernel (numba, where installed) from this many
#: pairs on, or whenever numba is already imported; in row chunks of FINISH_CHUNK, in threads.
#: USE_FINISH_KERNEL = False: always the numpy path (tests compare the two).
FINISH_KERNEL_MIN_PAIRS = 2_000_000
FINISH_CHUNK = 4096
USE_FINISH_KERNEL = True
#: Brute force runs the compiled search (:mod:`budro._knn_numba`, numba where installed) from this
#: many compared pairs (n^2) on; its float32 dot products come in row blocks of about
#: KNN_BLOCK_BYTES.  USE_KNN_KERNEL = False: always scikit-learn's.
KNN_KERNEL_MIN_PAIRS = 200_000_000
#: The cost model's one-thread nanoseconds of the compiled search per pair, and per pair and
#: coordinate (measured as BRUTE_NS_PER_PAIR, ``benchmarks/neighbor_choice.py``: 2.2-2.3 s at
#: 30000 x 19 and m = 100, 2.9-3.0 s at Adult's 30053 x 38, one thread; 2.2 s on two threads at
#: 50000 x 19 and m = 32).
KNN_NS_PER_PAIR, KNN_NS_PER_PAIR_DIM = 1.2, 0.05
KNN_BLOCK_BYTES = 16 << 20
USE_KNN_KERNEL = True
#: The compiled search computes each pair's product once (:func:`_symmetric_search`) from
#: KNN_SYMMETRIC_MIN_N points on, where its kept candidates (8 bytes each,
#: :func:`_symmetric_capacity` a row) take at most KNN_SYMMETRIC_MAX_BYTES; else twice, in row
#: blocks.  Its tiles hold KNN_TILE_ROWS x KNN_TILE_COLS products; its schedule cuts the points
#: into 2 KNN_GROUPS_PER_THREAD groups per thread (more groups: better balance, more waits).
KNN_SYMMETRIC_MIN_N = 8192
KNN_SYMMETRIC_MAX_BYTES = 1 << 30
KNN_TILE_ROWS, KNN_TILE_COLS = 256, 2048
KNN_GROUPS_PER_THREAD = 4
#: ``dedupe="auto"`` searches the distinct points only when they are at most this share of the rows.
DEDUPE_MAX_SHARE = 0.9
#: faiss IVF: about ``IVF_POINTS_PER_CELL`` points per k-means cell, the ``IVF_NPROBE`` nearest cells searched.
IVF_POINTS_PER_CELL = 256
IVF_NPROBE = 16
#: faiss HNSW: graph degree, construction and search breadth (at least 2 m).
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 40, 64
#: Seed of the k-means of the IVF index (same cells, same lists, on every run).
_SEED = 1234


def _sklearn_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    from sklearn.neighbors import NearestNeighbors

    algorithm = "auto" if Z.shape[0] <= _BRUTE_FORCE_MAX_N else "kd_tree"
    nn = NearestNeighbors(n_neighbors=m, algorithm=algorithm, n_jobs=threads).fit(Z)
    return nn.kneighbors(Z, return_distance=False)


class _AxesTree:
    """scipy's k-d tree on the principal axes of Z: a rotation (distances unchanged up to
    rounding) after which the tree's cells follow the directions the data spread along."""

    def __init__(self, Z: np.ndarray):
        from scipy.spatial import cKDTree

        n = Z.shape[0]
        centred = Z - Z.mean(axis=0)
        sample = centred[:: max(1, n // 100_000)]
        # The axes as eigenvectors of the p x p scatter matrix, largest spread first: an SVD of
        # the sample itself gives the same axes (up to sign) but computes its n x p left factor
        # too (Adult, 30053 x 38: 25-50 ms alone, 0.25 s inside a fit's set-up, against 1-3 ms).
        _, axes = np.linalg.eigh(sample.T @ sample)
        self.rotated = centred @ axes[:, ::-1]
        self.tree = cKDTree(self.rotated, balanced_tree=False)

    def _seeded_rows(self) -> np.ndarray:
        """The :data:`DIMENSION_SAMPLE` seeded points of the estimates (sorted; the same on every run)."""
        rows = getattr(self, "_rows", None)
        if rows is None:
            n = self.rotated.shape[0]
            rows = self._rows = np.sort(np.random.default_rng(_SEED).choice(n, size=min(n, DIMENSION_SAMPLE),
                                                                             replace=False))
        return rows

    def _query_seeded(self, m: int, count: int, threads: int) -> np.ndarray:
        """The k = max(m, 10) nearest distances of the first ``count`` seeded points (queried on
        ``threads`` threads: each query's result is its own, the same distances); their m-th
        nearest distances are kept for :meth:`examined`, so that a later call queries only the
        points not queried yet."""
        k = int(min(max(m, 10), self.rotated.shape[0]))
        held = getattr(self, "_radius", None)
        done = held[1] if held is not None and held[0] == m else np.empty(0)
        rows = self._seeded_rows()[done.size:count]
        dist, _ = self.tree.query(self.rotated[rows], k=k, workers=max(1, int(threads)))
        dist = np.asarray(dist).reshape(len(rows), k)
        self._radius = (m, np.concatenate([done, dist[:, min(m, k) - 1]]))
        return dist

    def intrinsic_dimension(self, m: int, threads: int = 1) -> float:
        """Levina and Bickel's maximum-likelihood estimate of the data's dimension at the scale of
        the m nearest neighbours, from :data:`DIMENSION_SAMPLE` seeded points (deterministic;
        queried on ``threads`` threads, the same distances; kept per m).  A k-d tree is fast when
        it is low, close to brute force when it is high."""
        held = getattr(self, "_dimension", None)
        if held is None or held[0] != m:
            self._radius = None  # every seeded point is queried here (all k distances needed)
            self._dimension = held = (m, self._dimension_of(self._query_seeded(m, DIMENSION_SAMPLE, threads)))
        return held[1]

    @staticmethod
    def _dimension_of(D: np.ndarray) -> float:
        """The estimate from each query's sorted nearest distances ``D`` (one row a query)."""
        k = D.shape[1]
        # Per query, over its positive distances d (the point itself and its copies left out:
        # sorted, they are a suffix), the mean of log(d[-1] / d[:-1]) where there are at least
        # three and d[-1] > d[0]; in whole-array operations (a loop of small ones would wait for
        # the interpreter at each, beside the set-up's background thread)
        positive = D > 0
        count = positive.sum(axis=1)
        last = D[:, -1]
        first = D[np.arange(len(D)), np.minimum(k - count, k - 1)]
        used = (count >= 3) & (last > first)
        if not used.any():
            return 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.where(positive, np.log(last[:, None] / np.where(positive, D, 1.0)), 0.0)
        inverse = logs[used].sum(axis=1) / (count[used] - 1)
        return float(1.0 / max(np.mean(inverse), 1e-12))

    def examined(self, m: int, threads: int = 1, queries: int | None = None) -> float:
        """Points a query of the m nearest examines, estimated without timing anything (so the
        choice it informs depends on the data only): over the first ``queries`` (default
        :data:`EXAMINED_SAMPLE`) of the seeded points of :meth:`intrinsic_dimension`, the mean
        number of points in the tree's leaves whose bounding box meets the ball of the query's
        m-th nearest distance (those distances queried on ``threads`` threads where no earlier
        estimate has them)."""
        rows = self._seeded_rows()[: EXAMINED_SAMPLE if queries is None else int(queries)]
        held = getattr(self, "_radius", None)
        if held is None or held[0] != m or held[1].size < len(rows):
            self._query_seeded(m, len(rows), threads)
        radius = self._radius[1][: len(rows)]
        lo, hi, sizes = self._leaf_boxes()
        points = self.rotated[rows]
        if not len(points):
            return float(sizes.sum())
        # queries in chunks of about EXAMINED_CHUNK box coordinates (few, large operations: see
        # intrinsic_dimension)
        chunk = max(1, EXAMINED_CHUNK // max(1, lo.size))
        counts = np.empty(len(points))
        for s in range(0, len(points), chunk):
            q = points[s:s + chunk, None, :]
            gap = np.maximum(np.maximum(lo - q, q - hi), 0.0)
            r = radius[s:s + chunk, None]
            counts[s:s + chunk] = (np.einsum("qij,qij->qi", gap, gap) <= r * r * (1 + 1e-9)) @ sizes
        return float(np.mean(counts))

    def _leaf_boxes(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The bounding boxes (lower, upper corners) and point counts of the tree's leaves (kept)."""
        held = getattr(self, "_boxes", None)
        if held is not None:
            return held
        leaves, stack = [], [self.tree.tree]
        while stack:  # leaf ranges of tree.indices (a few thousand nodes per 10^5 points)
            node = stack.pop()
            if node.split_dim == -1:
                leaves.append(node.start_idx)
            else:
                stack += [node.lesser, node.greater]
        starts = np.sort(np.asarray(leaves, dtype=np.intp))
        points = self.rotated[self.tree.indices]
        lo = np.minimum.reduceat(points, starts, axis=0)
        hi = np.maximum.reduceat(points, starts, axis=0)
        sizes = np.diff(np.append(starts, len(points)))
        self._boxes = (lo, hi, sizes)
        return self._boxes

    def query(self, m: int, threads: int) -> np.ndarray:
        n = self.rotated.shape[0]
        # Queries in the tree's own order (neighbouring queries visit the same nodes: 2.2x faster
        # at 10^5 points than in row order, same lists), then back in row order.
        order = self.tree.indices
        _, idx = self.tree.query(self.rotated[order], k=m, workers=threads)
        out = np.empty((n, m), dtype=np.intp)
        out[order] = np.asarray(idx, dtype=np.intp).reshape(n, m)
        return out


def _brute_force_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    """Exact m nearest neighbours by brute force: the compiled search (:mod:`budro._knn_numba`)
    where :func:`_knn_kernel` gives it, else scikit-learn's."""
    kernel = _knn_kernel(Z.shape[0])
    if kernel is not None:
        return _compiled_brute_force(kernel, Z, m, threads)
    from sklearn.neighbors import NearestNeighbors

    nn = NearestNeighbors(n_neighbors=m, algorithm="brute", n_jobs=threads).fit(Z)
    return nn.kneighbors(Z, return_distance=False)


def _sparse_kernels_available() -> bool:
    """Whether numba can be imported (:func:`budro.solvers._sparse_kernels.available`)."""
    from budro.solvers import _sparse_kernels

    return _sparse_kernels.available()


def _knn_kernel(n: int):
    """The compiled brute-force search (:func:`budro._knn_numba.select_rows`), or None for
    scikit-learn's: used where numba is installed and the search compares at least
    KNN_KERNEL_MIN_PAIRS pairs (where scikit-learn's takes longer than numba's start).  Not
    whenever numba happens to be imported already: the two break ties at the m-th cost
    differently, and a fit imports numba in a background thread, so the lists would depend on
    its timing."""
    if not USE_KNN_KERNEL or n * n < KNN_KERNEL_MIN_PAIRS:
        return None
    if not _sparse_kernels_available():
        return None
    from budro._knn_numba import select_rows

    return select_rows


def distance_error_factor(p: int, sq_max: float, sqc_max: float, unit: float) -> float:
    """``kappa`` such that ``kappa (|zc_i|^2 + |zc_j|^2)`` bounds how far ``|zc_i|^2 + |zc_j|^2 -
    2 <zc_i, zc_j>``, computed from the centred points ``zc`` rounded to a type of rounding unit
    ``unit`` (a dot of p terms), lies from the float64 cost of the given points (and its
    zero-snapping by ZERO_RTOL): a generous multiple of the rounding unit, with the centred and
    uncentred squared norms' largest values ``sqc_max`` and ``sq_max``.  0 when every centred
    point is exactly 0 (all points equal: every cost is exactly 0)."""
    if sqc_max <= 0.0:
        return 0.0
    ratio = 2.0 * (1.0 + sq_max / sqc_max)
    return (2 * p + 8) * unit + ((4 * p + 16) * 2.0**-53 + 2.0 * ZERO_RTOL) * ratio


def _compiled_brute_force(select_rows, Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    """Exact m nearest neighbours (ties at the m-th cost by row order): float32 dot products of the
    centred points (single-threaded GEMMs on ``threads`` Python threads: BLAS's own pool would
    spin beside the compiled selection), candidates by a certified bound on their rounding,
    exact float64 costs of the candidates (:mod:`budro._knn_numba`).  Each pair's product once
    (:func:`_symmetric_search`) where it applies, then the rows it leaves (and otherwise every
    row) by ``select_rows``, in row blocks of about KNN_BLOCK_BYTES of products."""
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    n, p = Z.shape
    Zc = Z - Z.mean(axis=0)
    Zf = np.ascontiguousarray(Zc, dtype=np.float32)
    sqc = np.einsum("ij,ij->i", Zc, Zc)
    sqc_max = float(sqc.max()) if n else 0.0
    # The lists' cost sums squared coordinate differences of the given points, each within 2^-53
    # of its own size: its rounding is relative to the cost, and the centring's (each centred
    # coordinate within 2^-53 of itself) relative to the centred norms.  The uncentred norms,
    # which bound the rounding of the full path's Gram formula, play no part: the bound takes
    # the centred norms for both (points at 1e6 from the origin, spread 1: 10.4 -> 0.3 s).
    kappa = distance_error_factor(p, sqc_max, sqc_max, 2.0**-24)
    out = np.empty((n, m), dtype=np.intp)
    with pool_limits(1, "blas"):
        rows = None
        if _symmetric_applies(n, m, sqc_max, kappa):
            rows = np.flatnonzero(_symmetric_search(Zf, Z, sqc, kappa, sqc_max, out, threads))
        if rows is None:
            size = int(max(16, min(n, KNN_BLOCK_BYTES // max(4 * n, 1))))

            def run(s0, s1):
                D = np.matmul(Zf[s0:s1], Zf.T)
                select_rows(D, 0, s1 - s0, s0, Z, sqc, kappa, sqc_max, out)

            run_spans(run, n, size, threads)
        elif len(rows):

            def redo(s0, s1):
                for q in rows[s0:s1]:
                    D = np.matmul(Zf[q:q + 1], Zf.T)
                    select_rows(D, 0, 1, q, Z, sqc, kappa, sqc_max, out)

            run_spans(redo, len(rows), max(1, -(-len(rows) // max(1, threads))), threads)
    return out


def _symmetric_sample_rank(m: int) -> int:
    """The symmetric search's threshold: the ``m // SAMPLE_STEP + SAMPLE_EXTRA``-th smallest key
    over every SAMPLE_STEP-th point (about m + SAMPLE_EXTRA SAMPLE_STEP points of all below it;
    a row whose m nearest hold more sampled points than that is searched again)."""
    from budro._knn_numba import SAMPLE_EXTRA, SAMPLE_STEP

    return m // SAMPLE_STEP + SAMPLE_EXTRA


def _symmetric_capacity(m: int) -> int:
    """Candidates kept per row by the symmetric search: twice those expected below the threshold,
    and 64 more (a row collecting more is searched again)."""
    from budro._knn_numba import SAMPLE_STEP

    return 2 * SAMPLE_STEP * _symmetric_sample_rank(m) + 64


def _symmetric_applies(n: int, m: int, sqc_max: float, kappa: float) -> bool:
    """Whether :func:`_symmetric_search` runs: from KNN_SYMMETRIC_MIN_N points, with enough
    sampled points for its threshold, its candidates within KNN_SYMMETRIC_MAX_BYTES, and every
    key representable in float32 (the kept keys' type)."""
    from budro._knn_numba import SAMPLE_STEP

    ks = _symmetric_sample_rank(m)
    return (n >= KNN_SYMMETRIC_MIN_N and n >= 4 * SAMPLE_STEP * ks and m <= n
            and 8 * n * _symmetric_capacity(m) <= KNN_SYMMETRIC_MAX_BYTES
            and sqc_max < 1e30 and kappa < 1.0)


def _round_robin(groups: int) -> list[list[tuple[int, int]]]:
    """Every pair of ``groups`` (even) groups once, in ``groups - 1`` rounds of disjoint pairs
    (the circle method of round-robin tournaments)."""
    rounds, last = [], groups - 1
    for r in range(last):
        pairs = [(r, last)]
        for k in range(1, groups // 2):
            pairs.append(((r + k) % last, (r - k) % last))
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs])
    return rounds


def _symmetric_search(Zf: np.ndarray, Z: np.ndarray, sqc: np.ndarray, kappa: float, sqc_max: float,
                      out: np.ndarray, threads: int) -> np.ndarray:
    """The m nearest points of every row (``out``, m = ``out.shape[1]``) with each pair's float32
    product computed once; returns the rows whose candidates may miss some (True: to be searched
    again by ``select_rows``).

    Per row a threshold from every SAMPLE_STEP-th point (a GEMM on those points only), then tiles
    of the upper triangle of the products (:func:`budro._knn_numba.collect_pairs`: each tile's
    pair tested for both its rows), then each row's exact m nearest among its candidates
    (:func:`budro._knn_numba.finish_candidates`).  The points are cut into groups (2
    KNN_GROUPS_PER_THREAD a thread): first each group's own triangle, then every pair of groups,
    in rounds of pairs with no group in common (no two threads write the same rows' candidates)."""
    from budro._knn_numba import SAMPLE_STEP, collect_pairs, finish_candidates, sample_thresholds

    n, m = out.shape
    ks = _symmetric_sample_rank(m)
    Zs = np.ascontiguousarray(Zf[::SAMPLE_STEP])
    sqs = np.ascontiguousarray(sqc[::SAMPLE_STEP])
    low = np.empty(n)  # the thresholds T (keys)
    size = int(max(16, min(n, KNN_BLOCK_BYTES // max(4 * len(Zs), 1))))

    def thresholds(s0, s1):
        sample_thresholds(np.matmul(Zf[s0:s1], Zs.T), 0, s1 - s0, s0, sqs, ks, low)

    run_spans(thresholds, n, size, threads)
    err = kappa * (sqc + sqc_max)
    lim = low + 2.0 * err
    cap = _symmetric_capacity(m)
    cand = np.empty((n, cap), dtype=np.int32)
    ckey = np.empty((n, cap), dtype=np.float32)
    count = np.zeros(n, dtype=np.int64)
    below = np.zeros(n, dtype=np.int64)
    groups = 2 * max(1, threads) * KNN_GROUPS_PER_THREAD
    edges = np.linspace(0, n, groups + 1).astype(np.int64)
    TR, TC = KNN_TILE_ROWS, KNN_TILE_COLS

    def tile(buf, i0, i1, j0, j1, both):
        D = buf[: (i1 - i0) * (j1 - j0)].reshape(i1 - i0, j1 - j0)
        np.matmul(Zf[i0:i1], Zf[j0:j1].T, out=D)
        collect_pairs(D, i0, j0, sqc, low, lim, cand, ckey, count, below, both)

    def own(g):  # the pairs within group g
        buf = np.empty(TR * max(TR, TC), dtype=np.float32)
        a0, a1 = int(edges[g]), int(edges[g + 1])
        for i0 in range(a0, a1, TR):
            i1 = min(a1, i0 + TR)
            tile(buf, i0, i1, i0, i1, False)  # the square on the diagonal: each row its own side
            for j0 in range(i1, a1, TC):
                tile(buf, i0, i1, j0, min(a1, j0 + TC), True)

    def across(pair):  # the pairs between two groups
        buf = np.empty(TR * TC, dtype=np.float32)
        a0, a1, b0, b1 = (int(edges[pair[0]]), int(edges[pair[0] + 1]), int(edges[pair[1]]), int(edges[pair[1] + 1]))
        for i0 in range(a0, a1, TR):
            for j0 in range(b0, b1, TC):
                tile(buf, i0, min(a1, i0 + TR), j0, min(b1, j0 + TC), True)

    def run(each):
        each(own, range(groups))
        for pairs in _round_robin(groups):
            each(across, pairs)

    if threads > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            run(lambda work, items: list(pool.map(work, items)))
    else:  # no pool to start on one thread
        run(lambda work, items: [work(item) for item in items])
    del lim
    # twice the bound on a kept key's error: the products' rounding (err) and float32's (a key
    # is at most 2 (sqc_q + sqc_max) + err in size)
    band = 2.0 * (err + 2.0**-21 * (sqc + sqc_max + err))
    redo = np.zeros(n, dtype=np.bool_)
    run_spans(lambda s0, s1: finish_candidates(s0, s1, Z, cand, ckey, count, below, band, out, redo), n,
              FINISH_CHUNK, threads)
    return redo


def _exact_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    """Exact m nearest neighbours: brute force up to EXACT_BRUTE_MAX_N points or when the data's
    dimension at the neighbours' scale exceeds KD_TREE_MAX_DIM, else the k-d tree on principal axes."""
    return _auto_neighbors(Z, m, threads, approximate=False)[0]


def _auto_neighbors(Z: np.ndarray, m: int, threads: int, *, approximate: bool = True) -> tuple[np.ndarray, str]:
    """``method="auto"`` (``approximate=False``: ``"exact"``): (lists, the method used)."""
    n = Z.shape[0]
    if n <= EXACT_BRUTE_MAX_N:
        return _brute_force_neighbors(Z, m, threads), "exact"
    tree = _AxesTree(Z)
    if approximate and n > APPROX_MIN_N and _has_faiss() and tree.intrinsic_dimension(m, threads) > APPROX_MIN_DIM:
        del tree
        return _faiss_ivf_neighbors(Z, m, threads), "faiss-ivf"
    # The k-d tree where the data's dimension allows it and the cost model does not find brute
    # force cheaper; the model first (its count of examined points needs 1/4 of the dimension's
    # queries, and where brute force is cheaper the dimension does not matter)
    if (not _brute_force_cheaper(tree, n, Z.shape[1], m, threads)
            and tree.intrinsic_dimension(m, threads) <= KD_TREE_MAX_DIM):
        return tree.query(m, threads), "exact"
    del tree
    return _brute_force_neighbors(Z, m, threads), "exact"


def _brute_force_cheaper(tree: _AxesTree, n: int, p: int, m: int, threads: int = 1) -> bool:
    """Whether brute force is expected to be faster than the k-d tree, by a model of both costs
    on the data (no timing: the choice depends on the data only; :func:`_brute_force_seconds`,
    :func:`_tree_seconds`).  Adult (30053 distinct points, m = 100) took 7.1 s with the tree
    against 2.3 s by brute force (``benchmarks/neighbor_choice.py``, docs/neighbors-benchmark.md)."""
    brute = _brute_force_seconds(n, p)
    if brute > BRUTE_MAX_SECONDS:
        return False
    # the examined count of the first EXAMINED_FIRST queries settles a choice that is not close
    # (Adult: the tree's estimate 5x brute force's), the whole sample the others
    first = _tree_seconds(tree, n, p, m, threads, queries=EXAMINED_FIRST)
    if max(brute, first) > EXAMINED_SETTLES * min(brute, first):
        return brute < first
    return brute < _tree_seconds(tree, n, p, m, threads)


def _brute_force_seconds(n: int, p: int) -> float:
    """The model's one-thread seconds of brute force: ``n^2 (BRUTE_NS_PER_PAIR +
    BRUTE_NS_PER_PAIR_DIM p)`` for scikit-learn's (the selection of the m nearest dominates its
    BLAS product), with KNN_NS_PER_PAIR and KNN_NS_PER_PAIR_DIM for the compiled search where
    :func:`_knn_kernel` gives it (float32 products: the part that grows with p)."""
    if _knn_kernel(n) is not None:
        return n * n * (KNN_NS_PER_PAIR + KNN_NS_PER_PAIR_DIM * p) * 1e-9
    return n * n * (BRUTE_NS_PER_PAIR + BRUTE_NS_PER_PAIR_DIM * p) * 1e-9


def _tree_seconds(tree: _AxesTree, n: int, p: int, m: int, threads: int = 1, queries: int | None = None) -> float:
    """The model's one-thread seconds of the k-d tree: ``n E t(p)`` for E points examined per
    query (:meth:`_AxesTree.examined`), where the time per examined point ``t(p) =
    TREE_NS_PER_POINT (p / 19)^TREE_DIM_POWER`` passes through the two measurements (42-52 ns at
    p = 19, 280-390 ns at Adult's p = 38, where the data's spread over many axes also defeats the
    tree's pruning)."""
    return n * tree.examined(m, threads, queries) * TREE_NS_PER_POINT * (p / 19.0) ** TREE_DIM_POWER * 1e-9


def _finish_kernel(pairs: int):
    """The compiled list-finishing kernel (:mod:`budro._lists_numba`), or None for the numpy path:
    used where numba is already imported (a fit's solver loads it during the set-up) or the lists
    hold at least FINISH_KERNEL_MIN_PAIRS pairs (where the numpy path takes longer than numba's
    start), and numba is installed."""
    if not USE_FINISH_KERNEL:
        return None
    if "numba" not in sys.modules and pairs < FINISH_KERNEL_MIN_PAIRS:
        return None
    if not _sparse_kernels_available():
        return None
    from budro._lists_numba import finish_rows

    return finish_rows


def _faiss_module():
    try:
        import faiss
    except ImportError:
        raise ValidationError(
            "NeighborCost: the faiss methods need the faiss package (pip install budro[neighbors], or faiss-cpu)"
        ) from None
    return faiss


def _has_faiss() -> bool:
    import importlib.util

    return importlib.util.find_spec("faiss") is not None


class _FaissThreads:
    """faiss's OpenMP threads set for a block and restored after."""

    def __init__(self, faiss, threads: int):
        self.faiss, self.threads = faiss, threads

    def __enter__(self):
        self.before = self.faiss.omp_get_max_threads()
        self.faiss.omp_set_num_threads(self.threads)
        return self

    def __exit__(self, *exc):
        self.faiss.omp_set_num_threads(self.before)


def _faiss_search(index, Zf: np.ndarray, m: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Search the rows ``rows`` of the index (default: all, in order), whose vectors are ``Zf``."""
    _, idx = index.search(Zf, m)
    idx = idx.astype(np.intp)
    missing = idx < 0  # fewer than m results (a tiny cell set): fill with the point itself
    if missing.any():
        own = np.arange(len(idx)) if rows is None else rows
        idx[missing] = np.broadcast_to(own[:, None], idx.shape)[missing]
    return idx


def _faiss_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    faiss = _faiss_module()
    index = faiss.IndexFlatL2(Z.shape[1])
    Zf = np.ascontiguousarray(Z, dtype=np.float32)
    index.add(Zf)
    with _FaissThreads(faiss, threads):
        return _faiss_search(index, Zf, m)


def _faiss_ivf_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    """Approximate: k-means cells (faiss IVF, float32), the IVF_NPROBE nearest cells searched.
    Deterministic: the k-means is seeded, and each centroid, assignment and query is computed the
    same way whatever the thread count."""
    faiss = _faiss_module()
    n, p = Z.shape
    Zf = np.ascontiguousarray(Z, dtype=np.float32)
    nlist = int(max(1, min(n // IVF_POINTS_PER_CELL, 65536)))
    with _FaissThreads(faiss, threads):
        quantizer = faiss.IndexFlatL2(p)
        index = faiss.IndexIVFFlat(quantizer, p, nlist)
        index.cp.seed = _SEED
        index.cp.max_points_per_centroid = IVF_POINTS_PER_CELL
        index.train(Zf)
        index.add(Zf)
        index.nprobe = min(nlist, IVF_NPROBE)
        # Queries cell by cell (consecutive queries probe the same cells, which stay in cache),
        # then back in row order.
        lists = index.invlists
        order = np.concatenate([faiss.rev_swig_ptr(lists.get_ids(c), lists.list_size(c)).copy()
                                for c in range(nlist) if lists.list_size(c)]).astype(np.intp)
        out = np.empty((n, m), dtype=np.intp)
        out[order] = _faiss_search(index, Zf[order], m, rows=order)
        return out


def _faiss_hnsw_neighbors(Z: np.ndarray, m: int, threads: int) -> np.ndarray:
    """Approximate: faiss HNSW graph (float32).  Built on one thread so the graph, and therefore
    the lists, do not depend on thread timing; searched on ``threads``."""
    faiss = _faiss_module()
    Zf = np.ascontiguousarray(Z, dtype=np.float32)
    index = faiss.IndexHNSWFlat(Z.shape[1], HNSW_M)
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    with _FaissThreads(faiss, 1):
        index.add(Zf)
    index.hnsw.efSearch = max(HNSW_EF_SEARCH, 2 * m)
    with _FaissThreads(faiss, threads):
        return _faiss_search(index, Zf, m)


def _search(method: str, Z: np.ndarray, m: int, threads: int) -> tuple[np.ndarray, str]:
    if method == "auto":
        return _auto_neighbors(Z, m, threads)
    return _NEIGHBOR_METHODS[method](Z, m, threads), method


_NEIGHBOR_METHODS = {
    "exact": _exact_neighbors,
    "sklearn": _sklearn_neighbors,
    "faiss": _faiss_neighbors,
    "faiss-ivf": _faiss_ivf_neighbors,
    "faiss-hnsw": _faiss_hnsw_neighbors,
}


def _distinct_rows(Z: np.ndarray, dedupe: bool | str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(first, inverse, counts)`` of the distinct rows of Z (``first``: the first row of each, in
    row order; ``Z[first][inverse] == Z``), or None when not deduplicating."""
    if dedupe is False or Z.shape[0] < 2:
        return None
    n = Z.shape[0]
    # Rows grouped by a hash of their bytes; every group is then checked row by row, so a hash
    # collision only costs time.
    _, first, inverse, counts = np.unique(_row_hashes(Z), return_index=True, return_inverse=True, return_counts=True)
    if dedupe == "auto" and len(first) > DEDUPE_MAX_SHARE * n:
        return None
    if not np.array_equal(Z[first][inverse], Z):  # a collision: group by the rows themselves
        rows = np.ascontiguousarray(Z).view(np.dtype((np.void, Z.dtype.itemsize * Z.shape[1]))).ravel()
        _, first, inverse, counts = np.unique(rows, return_index=True, return_inverse=True, return_counts=True)
    order = np.argsort(first, kind="stable")  # groups in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.ravel()], counts[order]


def _row_hashes(Z: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row's bytes (integer arithmetic: equal rows, equal hashes)."""
    bits = np.ascontiguousarray(Z, dtype=np.float64).view(np.uint64)
    mult = np.random.default_rng(_SEED).integers(1, 2**63, size=Z.shape[1], dtype=np.uint64) | np.uint64(1)
    with np.errstate(over="ignore"):
        return (bits * mult).sum(axis=1, dtype=np.uint64)


def _expand_copies(idx: np.ndarray, inverse: np.ndarray, counts: np.ndarray, m: int) -> np.ndarray:
    """Lists over rows from lists over distinct points: each listed distinct point stands for all
    its copies (rows in order), truncated at m.  ``idx`` (n_distinct, k) lists distinct points
    (-1: none).  By :func:`budro._lists_numba.expand_copies` where :func:`_finish_kernel` gives
    the compiled kernels (Adult, 30053 distinct points, m = 100: 0.24 s by numpy), else numpy."""
    n_distinct = len(counts)
    members = np.argsort(inverse, kind="stable")  # rows grouped by distinct point, in row order
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    if _finish_kernel(n_distinct * m) is not None:  # the same lists by a compiled loop
        from budro._lists_numba import expand_copies

        out = np.empty((n_distinct, m), dtype=np.intp)
        expand_copies(np.ascontiguousarray(idx, dtype=np.intp), members, starts, np.asarray(counts, dtype=np.intp), out)
        return out
    # Each list starts with the point itself (approximate searches may not return it first),
    # then the other listed points in order.
    own = np.arange(n_distinct)
    rest = np.where(idx == own[:, None], -1, idx)
    rest = np.take_along_axis(rest, np.argsort(rest < 0, axis=1, kind="stable"), axis=1)
    ordered = np.column_stack([own, rest])
    valid = 1 + (rest >= 0).sum(axis=1)
    rows = np.arange(n_distinct)
    out = np.empty((n_distinct, m), dtype=np.intp)
    col = np.zeros(n_distinct, dtype=np.intp)  # position in `ordered`
    off = np.zeros(n_distinct, dtype=np.intp)  # which copy of ordered[:, col] comes next
    for t in range(m):
        exhausted = col >= valid  # only if the search returned too few points: repeat the point itself
        cur = np.where(exhausted, own, ordered[rows, np.minimum(col, ordered.shape[1] - 1)])
        out[:, t] = members[starts[cur] + np.where(exhausted, 0, off)]
        off += 1
        done = off >= counts[cur]
        col[done] += 1
        off[done] = 0
    return out


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

    @classmethod
    def _derived(cls, losses: np.ndarray, labels: np.ndarray, cost: Cost, eps: float) -> "TransportProblem":
        """A problem made from the checked fields of another (its rows renumbered, say): float64
        finite losses (n, K), intp labels in [0, K), a cost for the n points, eps as checked; not
        checked again (at Adult's 36 177 rows the checks take about 0.1 ms a solve)."""
        problem = object.__new__(cls)
        object.__setattr__(problem, "losses", losses)
        object.__setattr__(problem, "labels", labels)
        object.__setattr__(problem, "cost", cost)
        object.__setattr__(problem, "eps", eps)
        return problem

    @property
    def n(self) -> int:
        return self.losses.shape[0]

    @property
    def n_labels(self) -> int:
        return self.losses.shape[1]

    @functools.cached_property
    def max_abs_loss(self) -> float:
        """``max |losses|``, computed once per problem (a solve reads it for its tie tolerances
        several times: at Adult's 36 177 rows 24 us each): ``np.abs(losses).max()`` exactly, as
        the larger of the largest loss and minus the smallest, without an n x K temporary (an array
        of fresh pages every solve inside a fit)."""
        losses = self.losses
        return abs(max(float(losses.max()), -float(losses.min())))

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
