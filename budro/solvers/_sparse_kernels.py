"""Compiled kernels (numba) for the sparse path of :class:`~budro.solvers.dual.DualSolver`.

The numpy path prunes a neighbour-list cost in several vectorised passes over the (n, m) lists
(dominance scans, a chord scan, then hull passes over the survivors, then a second exact hull and
a sort of every hull edge for the breakpoint guess), about 30 ms per round on Adult (n = 36177,
m = 32).  The kernel below does the same per column in one pass over its list, in float64, and
picks the breakpoint guess by a bucketed selection instead of a sort.

It computes exactly what the numpy path's documentation promises (the two are checked against
each other and against HiGHS in the tests): per column j, over its listed pairs in increasing
cost,

1. dominance: position r is kept iff ``R_r + tau >= max(R_0 .. R_{r-1})``;
2. runs of equal cost; a run member more than ``tau`` below the run's largest loss is dropped;
3. the tau-hull, built with a stack in cost order: a run is popped when it lies more than
   ``tau`` below the chord between the run under it and the next run (two points of the column
   certify that it never comes within ``tau`` of the column maximum; first and last run kept);
   the members of the surviving runs within ``tau`` of their run's largest loss are the
   candidates.  The numpy path drops runs in simultaneous passes instead; both keep only pairs
   that are certified never to tie, so they evaluate ``g`` identically;
4. the exact hull of those runs (the same stack with ``tau = 0``) gives the column's edges, with
   breakpoints ``e_k = max(dR_k / dC_k, 0)`` where the argmax cost drops by ``dC_k``.

numba is optional (``pip install budro[fast]``); without it the numpy path runs.  Compilation
is cached on disk (``cache=True``) and happens on first use.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys

import numpy as np

__all__ = ["available", "kernel_threads", "preload", "sparse_candidates", "prune", "select_breakpoint", "WarmBreakpoint", "group_top", "evaluate"]


def installed() -> bool:
    """Whether numba is installed, without importing it (a fraction of a millisecond)."""
    import importlib.util

    return importlib.util.find_spec("numba") is not None


@functools.cache
def available() -> bool:
    """Whether numba can be imported (checked once)."""
    try:
        import numba  # noqa: F401
    except Exception:  # ImportError, or a numba that fails against this numpy
        return False
    return True


def started() -> bool:
    """Whether numba has been imported in this process already (its start, 0.3-0.5 s of import
    and target initialisation, paid), without importing it."""
    import sys

    return "numba" in sys.modules


def compiled(solver) -> bool:
    """Whether a :class:`~budro.solvers.dual.DualSolver` runs the compiled kernels: its ``kernel``
    is ``"numba"``, or ``"auto"`` with numba installed (the sparse and the full paths alike)."""
    return solver.kernel == "numba" or (solver.kernel == "auto" and available())


#: The process that has run a parallel kernel (numba's threading layer started), or None.
_PARALLEL_PID: int | None = None


def note_parallel() -> None:
    """Record that this process runs a parallel kernel: numba's OpenMP threading layer is not
    fork-safe (a forked child that starts a parallel region is terminated), so the children of
    such a process run the kernels on one thread (:func:`kernel_threads`)."""
    global _PARALLEL_PID
    if _PARALLEL_PID is None:
        import os

        _PARALLEL_PID = os.getpid()


@contextlib.contextmanager
def parallel_threads(use: int):
    """Run a parallel kernel inside the block on ``use`` numba threads: the process is recorded
    as one that ran a parallel kernel (:func:`note_parallel`) and numba's thread count is
    restored after."""
    import numba

    note_parallel()
    before = numba.get_num_threads()
    numba.set_num_threads(use)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def forked_after_parallel() -> bool:
    """Whether this process is a fork of one that ran a parallel kernel."""
    if _PARALLEL_PID is None:
        return False
    import os

    return _PARALLEL_PID != os.getpid()


def kernel_threads(threads: int | None, columns: int | None) -> int:
    """The compiled kernels' thread count: ``threads`` when given (at most numba's
    ``NUMBA_NUM_THREADS``), else budro's choice for work spread over ``columns`` columns:
    :func:`budro._threads.default_threads` (one thread per 10 000 columns, at most the cores this
    process may use: German's 800 and COMPAS's 4222 columns get one, Adult's 36 177 two on a
    2-core machine), or every available core when ``columns`` is None (work per column large
    enough on its own: the full path's scans of n rows per column).  One in a forked child of a
    process that ran a parallel kernel, whatever ``threads`` says (:func:`note_parallel`)."""
    import numba

    if forked_after_parallel():
        return 1

    from budro._threads import available_cores, default_threads

    if threads is None:
        # the cgroup quota as read in the last few seconds: a solve of a fit calls this every round
        threads = available_cores(max_age=5.0) if columns is None else default_threads(columns, max_age=5.0)
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


#: Points of :func:`preload`'s synthetic problem: enough for the parallel kernel's threads.
PRELOAD_N = 20_000


def preload(threads: int | None, columns: int) -> None:
    """Import numba and load (or, on a first run, compile) the sparse path's kernels by two
    solves of a small synthetic problem (:data:`PRELOAD_N` points, 4 neighbours each, a cold and
    a warm-started round) through the solver's own code, with the candidate kernel on the threads
    that :func:`kernel_threads` gives ``threads`` for ``columns`` columns.  Failures are not
    raised here: the real solve meets them again and reports them."""
    try:
        if not available():  # imports numba: in the caller's background thread, not the fit's
            return
        threads = kernel_threads(threads, columns)
        from budro.solvers.dual import DualSolver
        from budro.transport import NeighborCost, TransportProblem

        rng = np.random.default_rng(0)
        n, m = PRELOAD_N, 4
        nb = np.empty((n, m), dtype=np.int64)
        nb[:, 0] = np.arange(n)
        nb[:, 1:] = (np.arange(n)[:, None] + np.arange(1, m)[None, :]) % n
        nc = np.zeros((n, m))
        nc[:, 1:] = np.cumsum(rng.random((n, m - 1)) + 0.1, axis=1)
        cost = NeighborCost.from_lists(nb, nc)
        cost.renumbered = True  # no locality renumbering: the lists are local already
        labels = rng.integers(0, 2, n)
        losses = rng.random((n, 2))
        solver = DualSolver(kernel="numba", kernel_threads=threads)
        first = solver.solve(TransportProblem(losses, labels, cost, 0.5))
        solver.solve(TransportProblem(losses + 0.01 * rng.random((n, 2)), labels, cost, 0.5), eta0=first.eta)
    except Exception:  # pragma: no cover - reported by the real solve
        pass


def _kernels():
    """The compiled functions' module (imports numba)."""
    from budro.solvers import _sparse_numba

    return _sparse_numba


class Workspace:
    """Output buffers of the candidate kernel, kept from one solve to the next (one per list
    layout): a fresh n m-sized buffer every round costs page faults on first touch (about 2 ms
    per round on Adult).  What :func:`sparse_candidates` returns are views into them, valid
    until the next call with the same workspace.  ``cap``: the most list entries (n m), which
    pruned lists of the same columns never exceed."""

    def __init__(self, n: int, cap: int):
        self.out_rows = np.empty(cap, dtype=np.intp)
        self.out_cols = np.empty(cap, dtype=np.intp)
        self.out_R = np.empty(cap)
        self.out_C = np.empty(cap)
        self.edge_e = np.empty(max(cap - n, 1))
        self.edge_dc = np.empty(max(cap - n, 1))
        self.last_cost = np.empty(n)
        self.col_count = np.empty(n, dtype=np.int64)
        self.edge_count = np.empty(n, dtype=np.int64)  # each column's hull edges (in column order)
        self.starts = np.zeros(n, dtype=np.intp)


def uniform_ptr(n: int, m: int) -> np.ndarray:
    """Where each of n lists of length m starts in the flattened (n, m) arrays, and their end."""
    return np.arange(n + 1, dtype=np.int64) * m


def sparse_candidates(labels: np.ndarray, K: int, C: np.ndarray, flat: np.ndarray, losses_flat: np.ndarray,
                      tau: float, weights: np.ndarray, threads: int | None = 1, workspace: Workspace | None = None,
                      ptr: np.ndarray | None = None, width: int | None = None,
                      spans: tuple[np.ndarray, np.ndarray] | None = None, floor: float = 0.0,
                      ceiling: float = math.inf):
    """Run the candidate kernel on lists in increasing cost per column.

    ``flat[j, r] = row * K + labels[j]`` indexes ``losses_flat``; ``weights`` are the columns'
    multiplicities (ones for a plain problem).  Lists of any lengths are given flattened, with
    ``ptr`` (column j is ``flat[ptr[j]:ptr[j + 1]]``, ``C`` likewise) or ``spans = (lo, hi)``
    (column j is ``flat[lo[j]:hi[j]]``: lists anywhere in the arrays, in any order, with room
    between them), and ``width`` (the longest).
    Returns ``(rows, cols, R, C, n_dominance, edges_e, edges_dc, last_cost, starts)``: the
    candidate pairs grouped by column in increasing cost, the number kept by dominance, the exact
    hulls' edges (cost drops times the weights), each column's largest hull cost and where each
    column starts.  ``threads``: the kernel's threads (None: :func:`kernel_threads`' choice for
    the number of columns).  ``floor`` > 0: candidates and hulls exact for eta >= floor only
    (far fewer pairs where the losses rise along the lists; see ``_sparse_numba._columns``);
    ``ceiling`` < inf: for eta <= ceiling only as well.
    """
    kern = _kernels()
    if spans is not None:
        lo, hi = spans
        n = lo.size
        ends = np.cumsum(hi - lo)  # each column's list entries up to its own, in column order
    else:
        if ptr is None:
            n, m = flat.shape
            ptr, width = uniform_ptr(n, m), m
            flat, C = flat.reshape(-1), C.reshape(-1)
        n = ptr.size - 1
        lo, hi = ptr[:-1], ptr[1:]
        ends = None  # ptr[1:] - ptr[0], read at the chunks' bounds only
    total = (int(ends[-1]) if ends is not None else int(ptr[-1] - ptr[0])) if n else 0
    ws = workspace if workspace is not None else Workspace(n, max(total, 1))
    args = (int(K), labels, lo, hi, C, flat, losses_flat, float(tau), weights, ws.out_rows, ws.out_cols, ws.out_R,
            ws.out_C, ws.edge_e, ws.edge_dc, ws.last_cost, ws.col_count, ws.edge_count, int(width), float(floor),
            float(kern.abs_max(losses_flat)) if (floor > 0.0 or ceiling < math.inf) and losses_flat.size else 0.0,
            float(ceiling))
    use = kernel_threads(threads, n)
    if use == 1 or n < 256:
        size, n_dom, n_edge = kern.candidates_serial(*args)
        starts = ws.starts
        np.cumsum(ws.col_count[:-1], out=starts[1:])
        return (ws.out_rows[:size], ws.out_cols[:size], ws.out_R[:size], ws.out_C[:size], int(n_dom),
                ws.edge_e[:n_edge], ws.edge_dc[:n_edge], ws.last_cost, starts)
    # one chunk per thread: numba divides a prange evenly among its threads anyway (more chunks
    # balanced nothing), and every chunk after the first is moved down afterwards (_compact:
    # 10^6 points, 8 chunks 193-200 ms for the call, 2 chunks 176-187 ms, the same outputs)
    chunks = max(1, min(n, use))
    bounds = np.linspace(0, n, chunks + 1).round().astype(np.int64)
    # the list entries before each chunk
    if ends is None:
        first = ptr[bounds[:-1]] - ptr[0]
    else:
        first = np.concatenate(([0], ends[bounds[1:-1] - 1])).astype(np.int64)
    counts = np.zeros((chunks, 3), dtype=np.int64)
    with parallel_threads(use):
        kern.candidates(bounds, first, *args, counts)
    starts = ws.starts
    np.cumsum(ws.col_count[:-1], out=starts[1:])
    # Each chunk's output moved down to follow the one before, in the workspace itself (the
    # outputs are views of it, as on one thread): new arrays of millions of pairs cost their page
    # faults on every call (10^6 points: 5.5 million pairs and 4.5 million edges a round).
    size = _compact((ws.out_rows, ws.out_cols, ws.out_R, ws.out_C), first, counts[:, 0])
    n_edge = _compact((ws.edge_e, ws.edge_dc), first - bounds[:-1], counts[:, 2])
    return (ws.out_rows[:size], ws.out_cols[:size], ws.out_R[:size], ws.out_C[:size], int(counts[:, 1].sum()),
            ws.edge_e[:n_edge], ws.edge_dc[:n_edge], ws.last_cost, starts)


def _compact(arrays, at: np.ndarray, lengths: np.ndarray) -> int:
    """Move the runs ``[at[c], at[c] + lengths[c])`` of each array down to follow each other from
    0, in order (a run only moves down, after the runs before it have moved; numpy copies through
    a buffer where a run overlaps its destination); returns their total length."""
    size = 0
    for a, length in zip(at.tolist(), lengths.tolist()):
        if a != size:
            for arr in arrays:
                arr[size:size + length] = arr[a:a + length]
        size += length
    return size


def prune(ptr: np.ndarray, C: np.ndarray, flat: np.ndarray, losses_flat: np.ndarray, labels: np.ndarray,
          margin: np.ndarray, out_ptr: np.ndarray, out_C: np.ndarray, out_flat: np.ndarray) -> tuple[int, int, int]:
    """The lists kept for a warm start (see ``_sparse_numba.prune``): writes them into ``out_*``
    (capacity ``ptr[-1]``) and returns (entries kept, longest list, entries half the margins keep)."""
    size, width, half = _kernels().prune(ptr, C, flat, losses_flat, labels, margin, out_ptr, out_C, out_flat)
    return int(size), int(width), int(half)


def select_breakpoint(e: np.ndarray, dc: np.ndarray, need: float) -> float:
    """``min{t in e : sum(dc[e <= t]) >= need}`` (``max(e)`` if never), in O(len(e))."""
    if e.size == 0:
        return 0.0
    return float(_kernels().select(np.ascontiguousarray(e), np.ascontiguousarray(dc), float(need), 1024))


class WarmBreakpoint:
    """:func:`select_breakpoint` started from the last answers: the minimiser of g moves little
    from one round to the next (a few per cent, steadily, at the paper's learning rates), so
    the selection is first tried in windows around guesses, in one pass
    (``_sparse_numba.select_windows``), else made in full: the last answer extrapolated by its
    last change, and the answer of two calls before extrapolated by its change over two calls
    (a fit whose minimiser alternates between two rising sequences, round by round: the 10^6-row
    synthetic fit, where the first guess always missed).  The same answer either way: ``min{t in
    e : sum(dc[e <= t]) >= need}`` (sums in another order, so only a tie of ``need`` with a
    partial sum to the last bit could tell them apart; g's evaluation certifies the answer in any
    case).  The windows' relative half-width shrinks after a hit, grows fourfold after the
    answer fell outside both, and shrinks fourfold after a window held more values than its
    buffer (``cap``; at 10^6 points there are millions of edges)."""

    def __init__(self, cap: int = 65536):
        self.history: list[float] = []  # the last answers, newest last
        self.width = 1.0 / 32.0
        self.buffers = (np.empty((2, cap)), np.empty((2, cap)))
        self.codes = np.empty(2)
        self.hits = 0
        self.overflows = 0

    def _window(self, now: float, then: float | None) -> tuple[float, float]:
        """From ``now`` to ``now`` extrapolated by its relative change since ``then`` (bounded to
        [0.8, 1.25]; a minimiser's rise slows down as often as not), widened by the width."""
        guess = now * (min(max(now / then, 0.8), 1.25) if then else 1.0)
        return min(now, guess) * (1.0 - self.width), max(now, guess) * (1.0 + self.width)

    def __call__(self, e: np.ndarray, dc: np.ndarray, need: float) -> float:
        h = self.history
        t = -1.0
        if h and h[-1] > 0.0 and e.size:
            lo1, hi1 = self._window(h[-1], h[-2] if len(h) >= 2 else None)
            lo2, hi2 = -1.0, -2.0  # empty
            if len(h) >= 3 and h[-2] > 0.0:
                lo2, hi2 = self._window(h[-2], h[-4] if len(h) >= 4 else None)
                if lo1 <= lo2 and hi2 <= hi1:
                    lo2, hi2 = -1.0, -2.0
            t = float(_kernels().select_windows(np.ascontiguousarray(e), np.ascontiguousarray(dc), float(need),
                                                np.array([lo1, lo2]), np.array([hi1, hi2]), *self.buffers, self.codes))
            if t >= 0.0:
                self.hits += 1
                self.width = max(0.8 * self.width, min(self.width, 1.0 / 256.0))  # (kept below 1/256 once overflows put it there)
            elif np.any(self.codes == -2.0):  # too many values in a window
                self.overflows += 1
                self.width = max(0.25 * self.width, 2.0**-20)
            else:
                self.width = min(4.0 * self.width, 1.0)
        if t < 0.0:
            t = select_breakpoint(e, dc, need)
        self.history = (h + [t])[-4:]
        return t


def group_top(losses: np.ndarray, order: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group of rows (``order[starts[u]:starts[u + 1]]``, rows in increasing index within a
    group) and label: the largest loss (U, K) and the smallest row attaining it (U, K)."""
    K = losses.shape[1]
    top = np.empty((starts.size, K))
    rep = np.empty((starts.size, K), dtype=np.intp)
    _kernels().group_top(np.ascontiguousarray(losses, dtype=np.float64), order, starts, top, rep)
    return top, rep


def evaluate(starts: np.ndarray, rows: np.ndarray, R: np.ndarray, C: np.ndarray, eta: float, tie_rtol: float,
             scale: float, weights: np.ndarray, threads: int | None = 1, scratch: "SolveScratch | None" = None
             ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sum of the column maxima of ``R - eta C`` (times the columns' ``weights``) over candidate
    pairs grouped by column, and each column's cheapest / most expensive argmax row and their
    costs.  ``threads``: the kernel's threads (None: :func:`kernel_threads`' choice for the number
    of columns); the sum is the same on any number (the columns' terms added in column order).
    ``scratch``: a :class:`SolveScratch` whose recycled arrays take the outputs."""
    n = starts.size
    lo, hi = output_array(scratch, (n,), np.intp), output_array(scratch, (n,), np.intp)
    c_lo, c_hi, terms = (output_array(scratch, (n,), np.float64) for _ in range(3))
    args = (starts, rows, R, C, float(eta), float(tie_rtol), float(scale), weights, lo, hi, c_lo, c_hi, terms)
    use = kernel_threads(threads, n)
    if use == 1 or n < 256:
        total = _kernels().evaluate(*args)
    else:
        bounds = np.linspace(0, n, max(1, min(n, 4 * use)) + 1).round().astype(np.int64)
        with parallel_threads(use):
            total = _kernels().evaluate_parallel(bounds, *args)
    return float(total), lo, hi, c_lo, c_hi


class SolveScratch:
    """Arrays of the compiled solve kept from one solve to the next (one per list layout, one per
    locality renumbering): the recovery's, the evaluations of g's and the renumbering's row
    gathers'.  Fresh n-sized arrays every round cost page faults on first touch inside a fit
    (Adult, LightGBM: the recovery 1.0-1.1 ms a solve with its arrays fresh, 0.3-0.45 ms without;
    ``benchmarks/solve_phases.py``).

    :meth:`recycled` hands an array out again only once nothing but this scratch holds it
    (a result's weights and plan rows, an evaluation's argmax rows and costs, a gather's rows,
    the recovery's products summed at once): CPython's reference count of an array counts every
    view of it and every object holding it (what ``ndarray.resize(refcheck=True)`` checks), so
    an array still referenced anywhere -- a fit's last result, a caller's copy of its weights --
    is never written; a fit drops each round's result a round later, so two or three arrays of
    each kind go round.  Where reference counts are not available (not CPython), every array is
    fresh."""

    #: Most arrays kept for recycling (beyond it, fresh ones are handed out and not kept).
    MAX_RECYCLED = 24

    def __init__(self):
        self._recycled: list[np.ndarray] = []
        # The count of an array held by this scratch only, measured as the check reads it
        # (the same expression, so interpreter details cancel out); None: no recycling.
        self._free_count: int | None = None
        if hasattr(sys, "getrefcount"):
            self._recycled.append(np.empty(0))
            self._free_count = self._count(0)
            self._recycled.clear()

    def _count(self, i: int) -> int:
        return sys.getrefcount(self._recycled[i])

    def recycled(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` (contents undefined) that nothing else holds."""
        dtype = np.dtype(dtype)
        for i in range(len(self._recycled)):
            if self._recycled[i].shape == shape and self._recycled[i].dtype == dtype \
                    and self._count(i) == self._free_count:
                return self._recycled[i]
        out = np.empty(shape, dtype=dtype)
        if self._free_count is not None and len(self._recycled) < self.MAX_RECYCLED:
            self._recycled.append(out)
        return out


def output_array(scratch: SolveScratch | None, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An output array of ``shape`` and ``dtype`` (contents undefined): recycled by ``scratch``
    (arrays that nothing else holds), or fresh where it is None."""
    return np.empty(shape, dtype=dtype) if scratch is None else scratch.recycled(shape, dtype)


def switch_plan(rows_cheap: np.ndarray, rows_dear: np.ndarray, cost_cheap: np.ndarray, cost_dear: np.ndarray,
                deficit: float, switch: bool, labels: np.ndarray, losses: np.ndarray,
                scratch: SolveScratch | None = None):
    """The exact recovery and the plan's weights in one compiled pass (``_sparse_numba.switch_plan``):
    ``(rows, prod_loss, prod_cost, weights, split_column or None, n_switched, split_vals)``.  The
    plan's entries are the columns in order, then the split column's second row; ``rows`` their
    rows; each has the value 1/n except the split column's two, ``split_vals`` = ((1 - theta)/n,
    theta/n) (:func:`switched_entries` lays the entries out); ``prod_loss`` / ``prod_cost``: each
    entry's value times its loss / cost.  ``scratch``: a :class:`SolveScratch` whose recycled
    arrays take all of them."""
    n = rows_cheap.size
    K = losses.shape[1]
    out_rows = output_array(scratch, (n + 1,), np.intp)
    prod_loss, prod_cost = output_array(scratch, (n + 1,), np.float64), output_array(scratch, (n + 1,), np.float64)
    weights = output_array(scratch, (n, K), np.float64)
    weights.fill(0.0)
    split_vals = np.zeros(2)
    size, split, n_switched = _kernels().switch_plan(
        np.ascontiguousarray(rows_cheap, dtype=np.intp), np.ascontiguousarray(rows_dear, dtype=np.intp),
        np.ascontiguousarray(cost_cheap, dtype=np.float64), np.ascontiguousarray(cost_dear, dtype=np.float64),
        float(deficit), bool(switch), np.ascontiguousarray(labels, dtype=np.intp),
        np.ascontiguousarray(losses, dtype=np.float64), out_rows, prod_loss, prod_cost, weights, split_vals)
    return (out_rows[:size], prod_loss[:size], prod_cost[:size], weights, None if split < 0 else int(split),
            int(n_switched), (float(split_vals[0]), float(split_vals[1])))


def switched_entries(rows: np.ndarray, n: int, split: int | None, split_vals: tuple[float, float]
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The ``(cols, vals)`` of :func:`switch_plan`'s entries (``rows``: n, or n + 1 with a split
    column), as ``_switch_entries`` gives them."""
    cols = np.arange(rows.size)
    vals = np.full(rows.size, 1.0 / n)
    if split is not None:
        cols[n] = split
        vals[split], vals[n] = split_vals
    return cols, vals
