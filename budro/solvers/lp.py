"""The reference solver: the full transport LP (paper, eq. (4)) handed to HiGHS.

The LP has ``n^2`` variables ``Pi_ij >= 0``, ``n`` equality rows (column sums ``1/n``) and one
budget row ``<C, Pi> <= eps``.  It is exact but grows quickly (HiGHS needs about 1.3 s at
n = 300 and about 2 minutes and 0.8 GB at n = 800), so it is a test oracle for small problems;
:class:`budro.solvers.dual.DualSolver` solves the same LP exactly at any size.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from budro.exceptions import BudroError, ValidationError
from budro.solvers import _sizing
from budro.solvers.base import Solver
from budro.transport import TransportProblem, TransportResult

__all__ = ["LPSolver"]


class LPSolver(Solver):
    """Exact transport plan from the full LP in ``n^2`` variables, solved by HiGHS (scipy).

    Parameters
    ----------
    max_n : int, default 400
        Largest number of points accepted.  Larger problems are refused with a
        :class:`~budro.exceptions.ValidationError` giving the estimated time and memory (HiGHS:
        about ``1.3 s * (n / 300)^4.6`` and 1.2 KB per variable, from the measurements at n = 300
        and 800; :func:`budro.solvers._sizing.lp_estimate`), before the LP is built (use the
        ``dual`` solver instead).

    Notes
    -----
    ``eta`` is the dual value (marginal) of the budget row reported by HiGHS, made non-negative;
    when the LP is degenerate any value in the optimal dual interval may be returned.  With
    ``eps = 0`` the budget row is replaced by fixing every positive-cost pair at 0 (exact, and
    immune to HiGHS's absolute feasibility tolerance), so ``eta`` is NaN there.
    ``dual_objective`` is the LP optimum.
    """

    name = "lp"
    guarantee = (
        "The plan is an optimal vertex of the full transport LP (eq. (4)) as computed by HiGHS, "
        "feasible and optimal to HiGHS's tolerances (1e-10 here)."
    )
    exact = True

    #: Feasibility and optimality tolerances passed to HiGHS.
    _HIGHS_TOL = 1e-10

    def __init__(self, max_n: int = 400):
        if isinstance(max_n, bool) or not isinstance(max_n, numbers.Integral) or max_n < 1:
            raise ValidationError(f"LPSolver: max_n must be an integer >= 1, got {max_n!r}")
        self.max_n = int(max_n)

    def __repr__(self) -> str:
        return f"LPSolver(max_n={self.max_n})"

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False) -> None:
        """Refuse (ValidationError) more than ``max_n`` points, with the estimated time and memory
        (the LP has n^2 variables even for a sparse cost)."""
        if n > self.max_n:
            # Refused before the n^2 problem is built; the estimate is _sizing.lp_estimate's.
            raise ValidationError(
                f"LPSolver: n = {n} points exceeds max_n = {self.max_n}; the LP has n^2 = {n * n} variables and "
                f"HiGHS would need {_sizing.lp_estimate(n).describe()} (estimated; about 2 minutes and 0.8 GB "
                f"already at n = 800). Use the 'dual' solver, which solves the same LP exactly at any size, or "
                f"raise max_n."
            )

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        n = problem.n
        self.check_size(n)
        C = _dense_cost(problem)
        R = problem.column_losses(0, n)
        eps = problem.eps
        # Variable k = j * n + i is Pi_ij (column-major), so column j is the contiguous block j.
        c = -np.ascontiguousarray(R.T).ravel()
        cost_vec = np.ascontiguousarray(C.T).ravel()
        # Pairs with infinite cost (unlisted pairs of a sparse cost) are fixed at 0.
        allowed = np.isfinite(cost_vec)
        if not allowed.all():
            cost_vec = np.where(allowed, cost_vec, 0.0)
        A_eq = sp.kron(sp.eye_array(n, format="csr"), sp.csr_array(np.ones((1, n))), format="csr")
        b_eq = np.full(n, 1.0 / n)
        if eps > 0.0:
            # HiGHS's tolerances are absolute: dividing the budget row by eps makes a violation
            # relative to the budget (otherwise tiny costs let the plan exceed a small eps).
            # HiGHS refuses coefficients of 1e15 and more, so the scaled costs stay below 1e14.
            cost_max = float(cost_vec.max())
            scale = min(1.0 / max(eps, 1e-300), 1e14 / max(cost_max, 1e-290)) if cost_max > 0 else 1.0
            A_ub = sp.csr_array(cost_vec.reshape(1, n * n) * scale)
            b_ub = np.array([eps * scale])
            bounds = np.column_stack([np.zeros(n * n), np.where(allowed, np.inf, 0.0)])
        else:
            # eps = 0: only zero-cost pairs may carry mass; the budget row is then implied.
            A_ub = b_ub = None
            bounds = np.column_stack([np.zeros(n * n), np.where(allowed & (cost_vec == 0.0), np.inf, 0.0)])
        res = linprog(
            c,
            A_ub=A_ub,
            b_ub=b_ub,
            A_eq=A_eq,
            b_eq=b_eq,
            bounds=bounds,
            method="highs",
            options={
                "primal_feasibility_tolerance": self._HIGHS_TOL,
                "dual_feasibility_tolerance": self._HIGHS_TOL,
            },
        )
        if res.status != 0 or res.x is None:
            raise BudroError(
                f"LPSolver: HiGHS did not solve the transport LP (status {res.status}): {res.message}. "
                f"Costs spanning many orders of magnitude around eps = {eps:g} can defeat it; the 'dual' "
                f"solver solves the same LP without relying on HiGHS's tolerances."
            )

        plan = np.clip(res.x, 0.0, None).reshape(n, n).T  # plan[i, j] = Pi_ij
        eta = math.nan
        ineq = getattr(res, "ineqlin", None)
        marginals = getattr(ineq, "marginals", None) if ineq is not None else None
        if eps > 0.0 and marginals is not None and len(marginals) == 1 and np.isfinite(marginals[0]):
            # HiGHS minimises -objective over the budget row multiplied by `scale`.
            eta = max(0.0, -float(marginals[0]) * scale)
        return TransportResult.from_plan(
            problem,
            sp.csr_array(plan),
            eta=eta,
            dual_objective=-float(res.fun),
            n_iter=int(getattr(res, "nit", 0) or 0),
            converged=True,
            solver=self.name,
            info={"highs_status": int(res.status), "highs_message": str(res.message)},
        )


def _dense_cost(problem: TransportProblem) -> np.ndarray:
    """The full (n, n) cost matrix, assembled column block by column block."""
    cost, n = problem.cost, problem.n
    if cost.is_dense:
        return np.asarray(cost.column_block(0, n), dtype=np.float64)
    C = np.empty((n, n))
    for start, stop, block in cost.iter_blocks():
        C[:, start:stop] = block
    return C
