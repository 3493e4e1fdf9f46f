"""The transport-solver contract."""

from __future__ import annotations

import abc

from budro.exceptions import ValidationError
from budro.solvers._convergence import warn_not_converged
from budro.transport import TransportProblem, TransportResult

__all__ = ["Solver"]


class Solver(abc.ABC):
    """Solves one round's :class:`~budro.TransportProblem` (the public solver contract).

    A solver plugin subclasses this class and defines:

    * :meth:`_solve` ``(problem, *, eta0=None) -> TransportResult`` (abstract): the only required
      member.  ``problem`` has ``losses`` (n, K) float64 (the loss of the current model at point
      i under label k, in nats), ``labels`` (n,) ints in [0, K), ``cost`` (a
      :class:`~budro.transport.Cost`: squared fair distances, in the fair metric's units) and
      ``eps`` >= 0 (the budget, in the same units).  Return ``weights`` (n, K): non-negative,
      summing to 1, with label marginals equal to the label shares, the worst-case reweighting
      within the budget; ``objective = sum(weights * losses)``; ``transport_cost <= eps``; and
      ``eta`` (the dual variable of the budget, NaN if unknown).  ``eta0`` is a warm start for
      ``eta`` (last round's, or None); :meth:`solve` has already validated it (a number >= 0, or
      None).  Solvers that use it declare the ``"warm-start"`` capability; others ignore it.
    * :meth:`objective_tolerance` ``(problem) -> float``: how far below the LP optimum the
      objective may fall.  The default is :attr:`tolerance` ``* max(1, max |losses|)``, i.e.
      ``1e-9`` relative: exact.  An inexact solver raises :attr:`tolerance` or overrides this
      method with its a-priori bound; it must be finite, since the conformance kit compares every
      solver with the LP optimum.
    * :meth:`budget_tolerance` ``(problem) -> float``: how far ``transport_cost`` may exceed
      ``eps`` (default ``1e-9 * eps + 1e-12``: rounding only).

    The registry record (:class:`~budro.SolverPlugin`) declares the capabilities
    (:data:`budro.plugin_types.SOLVER_CAPABILITIES`), e.g. ``"sparse-cost"`` for solvers that
    accept a :class:`~budro.transport.NeighborCost`; BuDRO never hands a sparse cost to a solver
    without it.  :func:`budro.testing.check_solver` checks all of this (``docs/plugins.md``).
    """

    #: Registered name (set by the plugin record's factory users; informational).
    name: str = ""
    #: One sentence: what the returned plan is guaranteed to satisfy.
    guarantee: str = ""
    #: Informational: True for solvers whose plan is an exact optimum of the LP (eq. (4) of the
    #: paper).  The record's ``"exact"`` capability is what the registry and the kit read.
    exact: bool = False
    #: Relative objective tolerance used by the default :meth:`objective_tolerance`.
    tolerance: float = 1e-9

    def solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        """Solve ``problem``; ``eta0`` is an optional warm start for the dual variable (e.g. last round's)."""
        if not isinstance(problem, TransportProblem):
            raise ValidationError(f"{type(self).__name__}.solve expects a budro.TransportProblem, got {type(problem).__name__}")
        if eta0 is not None:
            try:
                eta0 = float(eta0)
            except (TypeError, ValueError):
                raise ValidationError(f"eta0 must be a number >= 0 or None, got {eta0!r}") from None
            if not (eta0 >= 0) or eta0 == float("inf"):
                eta0 = None  # a NaN or unusable warm start is simply ignored
        result = self._solve(problem, eta0=eta0)
        warn_not_converged(self, result)  # ConvergenceWarning naming the remaining gap, if not converged
        return result

    def prepare(self, n: int, *, sparse: bool) -> None:
        """Called once by a fit before its set-up (fair metric, neighbour graph), with the number
        of points and whether the cost will be a sparse neighbour-list cost.  A solver may start
        loading what its solves need (compiled kernels) in the background here, so that the
        loading overlaps the set-up; it must not change any result.  The default does nothing."""

    @abc.abstractmethod
    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        """Solve a validated ``problem``, optionally warm-started at ``eta0`` (see the class docstring)."""

    def objective_tolerance(self, problem: TransportProblem) -> float:
        """Largest amount by which the objective may fall below the LP optimum (absolute).

        Default: ``tolerance * max(1, max |losses|)``.  Must be finite for the conformance kit.
        """
        scale = max(1.0, problem.max_abs_loss)
        return float(self.tolerance) * scale

    def budget_tolerance(self, problem: TransportProblem) -> float:
        """Largest amount by which ``transport_cost`` may exceed ``eps`` (absolute)."""
        return 1e-9 * max(problem.eps, 1e-12) + 1e-12

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
