"""An exact solver of budro's per-round transport problem, written from the public contract.

The problem (``budro.TransportProblem``): move each point j's mass 1/n to points i, keeping its
label y_j, to maximise the loss ``sum_ij Pi_ij A_ij`` with ``A_ij = losses[i, y_j]``, subject to
``sum_ij Pi_ij C_ij <= eps``.  With one budget row, the Lagrangian for a multiplier ``eta >= 0``
separates by column: column j sends its mass to a row maximising ``A_ij - eta C_ij``.  As eta grows,
the chosen rows' mean cost ``c(eta)`` falls, stepwise; it changes only at the breakpoints
``eta = (A_ij - A_kj) / (C_ij - C_kj) > 0`` where two rows of a column tie.

So: list every breakpoint (O(n^3): this is for small n), find by bisection the first breakpoint
eta* at which c drops to eps or below, take the greedy plans just below eta* (cost above eps)
and just above it (cost at most eps), and mix them to spend exactly eps.  Both plans maximise the
Lagrangian at eta*, and the mixture meets the budget with equality: by LP duality it is optimal.
If the plain greedy plan (eta = 0) already fits the budget, it is optimal as it is.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from budro.exceptions import ValidationError
from budro.solvers.base import Solver
from budro.transport import TransportProblem, TransportResult


class BreakpointSolver(Solver):
    """Exact solver for dense costs by bisection over the Lagrangian's breakpoints.

    Parameters
    ----------
    max_n : int, default 200
        Largest problem accepted: the breakpoints take O(n^3) time and O(n^2) memory per column.
    merge_rtol : float, default 1e-12
        Breakpoints closer than this (relative) are merged, so that the greedy plans are read
        strictly between breakpoints, away from rounding ties.
    """

    name = "example-breakpoints"
    guarantee = "the LP optimum up to rounding (1e-9 relative), budget met"

    def __init__(self, max_n: int = 200, merge_rtol: float = 1e-12):
        if isinstance(max_n, bool) or not isinstance(max_n, numbers.Integral) or max_n < 1:
            raise ValidationError(f"max_n must be an integer >= 1, got {max_n!r}")
        if isinstance(merge_rtol, bool) or not isinstance(merge_rtol, numbers.Real) or not 0 <= merge_rtol < 1e-6:
            raise ValidationError(f"merge_rtol must be a number in [0, 1e-6), got {merge_rtol!r}")
        self.max_n = int(max_n)
        self.merge_rtol = float(merge_rtol)

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        n = problem.n
        if n > self.max_n:
            raise ValidationError(f"{self.name}: n = {n} exceeds max_n = {self.max_n} (O(n^3) breakpoints); "
                                  f"use budro's 'dual' solver for large problems")
        if problem.cost.is_sparse:
            raise ValidationError(f"{self.name} solves dense costs only (it does not declare 'sparse-cost')")
        A = problem.column_losses()  # A[i, j] = losses[i, labels[j]]
        C = np.asarray(problem.cost.column_block(0, n), dtype=np.float64)  # C[i, j]: cost of moving j to i
        eps = problem.eps
        if eps == 0.0:  # only free moves (zero cost, e.g. duplicates of the point itself)
            choice = np.argmax(np.where(C == 0.0, A, -np.inf), axis=0)
            return self._result(problem, choice, choice, 0.0, eta=math.inf)

        breakpoints = self._breakpoints(A, C)
        # representatives: one eta strictly inside each interval between breakpoints
        inner = 0.5 * (breakpoints[:-1] + breakpoints[1:])
        first = breakpoints[0] / 2 if breakpoints.size else 1.0
        last = breakpoints[-1] * 2 + 1 if breakpoints.size else 1.0
        reps = np.concatenate([[first], inner, [last]]) if breakpoints.size else np.array([first])

        def greedy(eta: float) -> tuple[np.ndarray, float]:
            choice = np.argmax(A - eta * C, axis=0)
            return choice, float(C[choice, np.arange(n)].mean())

        choice0, cost0 = greedy(float(reps[0]))
        if cost0 <= eps:  # the unconstrained greedy plan fits: eta* = 0
            return self._result(problem, choice0, choice0, 0.0, eta=0.0)
        lo, hi = 0, len(reps) - 1  # cost(reps[lo]) > eps >= cost(reps[hi]); costs fall with eta
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if greedy(float(reps[mid]))[1] > eps:
                lo = mid
            else:
                hi = mid
        above, c_above = greedy(float(reps[lo]))  # just below eta*: over budget
        below, c_below = greedy(float(reps[hi]))  # just above eta*: within budget
        theta = (eps - c_below) / (c_above - c_below)  # share of the over-budget plan
        return self._result(problem, above, below, theta, eta=float(breakpoints[lo]))

    def _breakpoints(self, A: np.ndarray, C: np.ndarray) -> np.ndarray:
        found = []
        for j in range(A.shape[1]):
            da = A[:, j, None] - A[None, :, j]
            dc = C[:, j, None] - C[None, :, j]
            with np.errstate(divide="ignore", invalid="ignore"):
                eta = da / dc
            found.append(eta[(da > 0) & (dc > 0)])
        etas = np.unique(np.concatenate(found)) if found else np.zeros(0)
        if etas.size > 1 and self.merge_rtol > 0:  # merge breakpoints equal up to rounding
            keep = np.concatenate([[True], np.diff(etas) > self.merge_rtol * etas[1:]])
            etas = etas[keep]
        return etas

    def _result(self, problem: TransportProblem, above: np.ndarray, below: np.ndarray, theta: float,
                *, eta: float) -> TransportResult:
        n = problem.n
        cols = np.arange(n)
        plan = np.zeros((n, n))
        np.add.at(plan, (below, cols), (1.0 - theta) / n)
        np.add.at(plan, (above, cols), theta / n)
        A = problem.column_losses()
        C = problem.cost.column_block(0, n)
        dual = math.nan
        if math.isfinite(eta):  # the Lagrangian's value at eta bounds the optimum from above
            dual = eta * problem.eps + float(np.max(A - eta * C, axis=0).mean())
        return TransportResult.from_plan(problem, plan, eta=eta, dual_objective=dual, n_iter=1, solver=self.name)

    def __repr__(self) -> str:
        return f"BreakpointSolver(max_n={self.max_n})"
