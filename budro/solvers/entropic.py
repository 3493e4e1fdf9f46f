"""Entropic transport solvers (paper, Appendix C.1-C.2, Algorithms 4, 5 and 7).

The transport LP of every BuDRO round (paper, eq. (4)) fixes only the column marginals of the
plan (``sum_i Pi_ij = 1/n``) and one budget row (``<C, Pi> <= eps``).  Adding the entropy
``gamma * H(Pi)`` to the objective makes its maximiser, for a fixed multiplier ``eta >= 0`` of the
budget row, a softmax in every column::

    Pi(eta)_ij = (1/n) * softmax_i((R_ij - eta * C_ij) / gamma),     R_ij = losses[i, labels[j]],

and the regularised problem is solved by the ``eta`` at which the budget binds:
``<C, Pi(eta)> = eps`` (the expected cost is decreasing in ``eta``), or ``eta = 0`` when
``<C, Pi(0)> <= eps`` already.

Two solvers are built on this:

* :class:`EntropicSolver` (``"entropic"``, alias ``"sinkhorn"``): a bracketing (safeguarded
  Newton) root find for ``eta`` over full passes (Algorithms 4 and 5);
* :class:`EntropicSGDSolver` (``"entropic-sgd"``): stochastic gradient steps on ``eta`` over
  minibatches of columns (Algorithm 7), then a feasible plan at the SGD ``eta``.

Both work in the log domain (the column maximum is subtracted before exponentiating, so nothing
overflows for any ``gamma > 0``), read costs column block by column block (no ``n x n`` array is
formed unless the cost object holds one), handle sparse :class:`~budro.transport.NeighborCost`
costs in ``O(n m)``, and run the per-column work through the Python array API, so the same code
runs on NumPy, PyTorch, CuPy or ``array_api_strict`` (see ``array_namespace``).

Guarantees (stated for the dense cost; for a :class:`~budro.transport.NeighborCost` read ``m``
for ``n`` and "the LP over the listed pairs" for "the LP"):

* the column marginals are exactly ``1/n`` (to rounding) and ``<C, Pi> <= eps`` as computed;
* ``dual_objective = g(eta) = eps * eta + (1/n) sum_j max_i (R_ij - eta C_ij)`` is the LP's dual
  function at the returned ``eta``, an upper bound on the LP optimum, so
  ``info["gap_bound"] = dual_objective - objective`` certifies the suboptimality of every result;
* at a converged root, ``gap_bound <= eta * (eps - <C, Pi>) + gamma * mean_j H(Pi_.j) <=
  tol * spread + gamma * log(n)``: the objective is within ``gamma log n`` (plus the root tolerance)
  of the LP optimum.  This is the number :meth:`EntropicSolver.objective_tolerance` reports.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from budro._array_api import namespace_name, resolve_namespace, to_numpy
from budro.exceptions import ValidationError
from budro.solvers import _sizing
from budro.solvers.base import Solver
from budro.transport import TransportProblem, TransportResult

__all__ = ["EntropicSolver", "EntropicSGDSolver"]

#: Default regularisation relative to the spread of the losses.
DEFAULT_GAMMA_REL = 1e-3
#: Factor by which the upper end of the bracket is grown (and a warm start shrunk).
_GROWTH = 4.0
#: Largest eta tried; far beyond any root for costs above 1e-200.
_ETA_CEILING = 1e250
#: Default memory of one block of columns (about six temporaries of this size are live).
DEFAULT_ENTROPIC_BLOCK_BYTES = 8 * 2**20
#: Absolute allowance, relative to max(1, max |losses|), for rounding in the reported objective.
_ROUNDING_RTOL = 1e-9


# ---------------------------------------------------------------------------------------------
# Parameter checks


def _check_real(name: str, value: Any, *, low: float, high: float = math.inf, low_open: bool = True,
                owner: str) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and v <= high
    if not ok:
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise ValidationError(f"{owner}: {name} must be a finite number {bound}, got {value!r}")
    return float(value)


def _check_int(name: str, value: Any, *, low: int, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValidationError(f"{owner}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


# ---------------------------------------------------------------------------------------------
# One problem's per-column softmax in one array namespace


@dataclass(frozen=True)
class _Pass:
    """Column averages of one pass over columns at one ``eta`` (host floats)."""

    eta: float
    n_cols: int
    cost: float  # mean_j E_p[C_.j] = <C, Pi(eta)> over the columns seen
    vmax: float  # mean_j max_i (R_ij - eta C_ij), so that g(eta) = eps * eta + vmax
    entropy: float  # mean_j H(p_.j) (nats)
    curvature: float  # mean_j Var_p(C_.j) / gamma = -d cost / d eta (NaN unless asked)
    weights: np.ndarray | None = None  # (n, K) when a final pass
    plan: Any = None  # scipy sparse (n, n) when a final pass on a small problem


class _ColumnSoftmax:
    """``Pi(eta)`` column by column for one problem, computed in the array namespace ``xp``.

    Columns are laid out along axis 1 and their support (the n rows, or the m listed neighbours)
    along axis 0, so every reduction is over axis 0.  Costs come from ``cost.column_block`` in
    blocks of ``block_bytes`` (or once, when the cost object already holds the whole matrix).
    """

    def __init__(self, problem: TransportProblem, xp: Any, device: Any, gamma: float, block_bytes: int):
        self.problem = problem
        self.xp = xp
        self.device = device
        self.gamma = float(gamma)
        self.n, self.K = problem.n, problem.n_labels
        cost = problem.cost
        self.sparse = bool(cost.is_sparse)
        n, K = self.n, self.K
        self._losses = self._asarray(problem.losses, xp.float64)
        self._labels_host = problem.labels
        if self.sparse:
            nb = np.asarray(cost.neighbors, dtype=np.int64)
            self.support = nb.shape[1]
            self._neighbors_host = nb
            # Flat indices into losses of R[neighbors[j, r], labels[j]], laid out (m, n).
            self._gather = self._asarray(np.ascontiguousarray((nb * K + problem.labels[:, None]).T), xp.int64)
            self._costs = self._asarray(np.ascontiguousarray(np.asarray(cost.neighbor_costs, dtype=np.float64).T),
                                        xp.float64)
            self._losses_flat = xp.reshape(self._losses, (-1,))
        else:
            self.support = n
            self._labels = self._asarray(problem.labels, xp.int64)
            self._costs = self._asarray(cost.column_block(0, n), xp.float64) if cost.is_dense else None
        self.width = int(max(1, min(n, block_bytes // max(8 * self.support, 1))))
        self._neg_inf = self._asarray(-math.inf, xp.float64)
        self._label_ids = xp.reshape(xp.arange(K, dtype=xp.int64, **self._dev()), (1, K))
        #: Full passes over the columns so far.
        self.n_passes = 0

    # -- helpers

    def _dev(self) -> dict:
        return {} if self.device is None else {"device": self.device}

    def _asarray(self, a: Any, dtype: Any) -> Any:
        return self.xp.asarray(a, dtype=dtype, **self._dev())

    def _block(self, cols: np.ndarray | tuple[int, int]) -> tuple[Any, Any, Any]:
        """``(R, C, labels)`` of the given columns: (support, b), (support, b), (b,)."""
        xp = self.xp
        if isinstance(cols, tuple):
            start, stop = cols
            idx = None
        else:
            idx = self._asarray(cols, xp.int64)
        if self.sparse:
            if idx is None:
                gather, C = self._gather[:, start:stop], self._costs[:, start:stop]
            else:
                gather, C = xp.take(self._gather, idx, axis=1), xp.take(self._costs, idx, axis=1)
            R = xp.reshape(xp.take(self._losses_flat, xp.reshape(gather, (-1,))), gather.shape)
            labels = None
        else:
            if idx is None:
                labels = self._labels[start:stop]
                if self._costs is not None:
                    C = self._costs[:, start:stop]
                else:
                    C = self._asarray(self.problem.cost.column_block(start, stop), xp.float64)
            else:
                labels = xp.take(self._labels, idx)
                if self._costs is not None:
                    C = xp.take(self._costs, idx, axis=1)
                else:
                    # Contiguous runs of the (sorted) columns, one cost block each.
                    breaks = np.flatnonzero(np.diff(cols) != 1) + 1
                    runs = np.split(cols, breaks)
                    block = np.concatenate([self.problem.cost.column_block(int(r[0]), int(r[-1]) + 1) for r in runs], axis=1)
                    C = self._asarray(block, xp.float64)
            R = xp.take(self._losses, labels, axis=1)
        return R, C, labels

    # -- the kernel

    def _softmax(self, eta: float, R: Any, C: Any) -> tuple[Any, Any, Any]:
        """Per-column softmax ``P`` of ``(R - eta C) / gamma``, the column maxima of ``R - eta C``
        and the normalisers ``sum_i exp(((R - eta C)_ij - max) / gamma)`` (>= 1)."""
        xp = self.xp
        if math.isinf(eta):
            V = xp.where(C > 0, self._neg_inf, R)  # the limit eta -> inf: zero-cost pairs only
        elif eta == 0.0:
            V = R
        else:
            V = R - eta * C
        vmax = xp.max(V, axis=0, keepdims=True)  # finite: staying put costs 0
        E = xp.exp((V - vmax) / self.gamma)  # in [0, 1], 1 at the maximum: no overflow
        s = xp.sum(E, axis=0, keepdims=True)
        return E / s, vmax, s

    def evaluate(self, eta: float, cols: np.ndarray | None = None, *, curvature: bool = False,
                 final: bool = False, keep_plan: bool = False) -> _Pass:
        """Column averages at ``eta`` over ``cols`` (all columns, block by block, when None).

        With ``final`` the weights (and with ``keep_plan`` the plan) are assembled too.  The
        averages do not depend on ``final``: a final pass reproduces a plain pass bit for bit.
        """
        xp = self.xp
        n = self.n
        if cols is None:
            chunks: list = [(s, min(n, s + self.width)) for s in range(0, n, self.width)]
            n_cols = n
            self.n_passes += 1
        else:
            cols = np.asarray(cols, dtype=np.int64)
            chunks = [cols[s : s + self.width] for s in range(0, cols.size, self.width)]
            n_cols = int(cols.size)
        finite_eta = 0.0 if math.isinf(eta) else float(eta)
        tot = dict(cost=0.0, vmax=0.0, entropy=0.0, var=0.0)
        W = None
        P_blocks = []
        plan_blocks = []
        for chunk in chunks:
            R, C, labels = self._block(chunk)
            P, vmax, s = self._softmax(eta, R, C)
            ec = xp.sum(P * C, axis=0)
            er = xp.sum(P * R, axis=0)
            vm = vmax[0, :]
            # H(p) = log s + (zmax - E_p z) with z = (R - eta C) / gamma; where eta = inf, P
            # vanishes off the zero costs, so E_p[eta C] is 0 there.
            gap = vm - (er - finite_eta * ec)
            tot["cost"] += float(xp.sum(ec))
            tot["vmax"] += float(xp.sum(vm))
            tot["entropy"] += float(xp.sum(xp.log(s[0, :]))) + float(xp.sum(gap)) / self.gamma
            if curvature:
                ec2 = xp.sum(P * (C * C), axis=0)
                tot["var"] += float(xp.sum(ec2 - ec * ec))
            if final:
                if self.sparse:
                    P_blocks.append(P)
                else:
                    onehot = xp.astype(xp.reshape(labels, (-1, 1)) == self._label_ids, xp.float64)
                    part = P @ onehot  # (n, K): mass each row receives from this block, per label
                    W = part if W is None else W + part
                    if keep_plan:
                        plan_blocks.append(to_numpy(P))
        weights = plan = None
        if final:
            if self.sparse:
                P_all = P_blocks[0] if len(P_blocks) == 1 else xp.concat(P_blocks, axis=1)  # (m, n)
                weights = self._sparse_weights(P_all)
                if keep_plan:
                    vals = to_numpy(P_all).T / n  # (n, m): column j's mass on neighbors[j, r]
                    rows = self._neighbors_host
                    cols_idx = np.broadcast_to(np.arange(n)[:, None], rows.shape)
                    plan = sp.csr_array((vals.ravel(), (rows.ravel(), cols_idx.ravel())), shape=(n, n))
                    plan.eliminate_zeros()
            else:
                weights = to_numpy(W) / n
                if keep_plan:
                    plan = sp.csr_array(np.concatenate(plan_blocks, axis=1) / n)
            weights = np.clip(weights, 0.0, None)
        k = max(n_cols, 1)
        return _Pass(
            eta=float(eta),
            n_cols=n_cols,
            cost=tot["cost"] / k,
            vmax=tot["vmax"] / k,
            entropy=max(0.0, tot["entropy"] / k),
            curvature=tot["var"] / k / self.gamma if curvature else math.nan,
            weights=weights,
            plan=plan,
        )

    def _sparse_weights(self, P: Any) -> np.ndarray:
        """``weights[i, k] = sum of P[r, j] over neighbors[j, r] = i, labels[j] = k`` (array API:
        a fixed sort of the slots by (label, row), then differences of a cumulative sum)."""
        xp = self.xp
        n, K = self.n, self.K
        if not hasattr(self, "_segments"):
            keys = (self._labels_host[None, :] * n + self._neighbors_host.T).ravel()  # (m, n) layout
            order = np.argsort(keys, kind="stable")
            bounds = np.searchsorted(keys[order], np.arange(K * n + 1))
            self._segments = (
                self._asarray(order, xp.int64),
                self._asarray(bounds[1:], xp.int64),
                self._asarray(bounds[:-1], xp.int64),
            )
        order, ends, starts = self._segments
        vals = xp.take(xp.reshape(P, (-1,)), order)
        cs = xp.cumulative_sum(vals, include_initial=True)
        per_key = xp.take(cs, ends) - xp.take(cs, starts)  # (K * n,) label-major
        return to_numpy(per_key).reshape(K, n).T / n


# ---------------------------------------------------------------------------------------------
# Shared solver machinery


class _EntropicBase(Solver):
    """Parameters and guarantees shared by the entropic solvers."""

    def _init_common(self, gamma, gamma_rel, tol, block_bytes, array_namespace, device, plan_max_entries):
        owner = type(self).__name__
        self.gamma = None if gamma is None else _check_real("gamma", gamma, low=0.0, owner=owner)
        self.gamma_rel = _check_real("gamma_rel", gamma_rel, low=0.0, owner=owner)
        self.tol = _check_real("tol", tol, low=0.0, high=1.0, owner=owner)
        self.block_bytes = _check_int("block_bytes", block_bytes, low=1, owner=owner)
        self.plan_max_entries = _check_int("plan_max_entries", plan_max_entries, low=0, owner=owner)
        if array_namespace is not None and not isinstance(array_namespace, str) and not hasattr(array_namespace, "asarray"):
            raise ValidationError(
                f"{owner}: array_namespace must be None, a library name ('numpy', 'torch', 'cupy', "
                f"'array_api_strict', ...) or a module, got {array_namespace!r}"
            )
        self.array_namespace = array_namespace
        self.device = device

    # -- the numbers behind the guarantee

    @staticmethod
    def loss_scale(problem: TransportProblem) -> float:
        """``max(losses) - min(losses)``, or 1 when every loss is the same: the unit of
        ``gamma_rel`` and ``tol``."""
        spread = float(problem.losses.max() - problem.losses.min())
        return spread if spread > 0.0 else 1.0

    def gamma_for(self, problem: TransportProblem) -> float:
        """The regularisation used on ``problem``: ``gamma``, else ``gamma_rel * loss_scale``."""
        return self.gamma if self.gamma is not None else self.gamma_rel * self.loss_scale(problem)

    @staticmethod
    def support_size(problem: TransportProblem) -> int:
        """Rows a column may move to: n, or m for a sparse :class:`~budro.transport.NeighborCost`."""
        return int(problem.cost.neighbors.shape[1]) if problem.cost.is_sparse else problem.n

    def _entropic_tolerance(self, problem: TransportProblem) -> float:
        """``gamma log(support) + tol * loss_scale``: the a-priori bound on the LP gap."""
        return self.gamma_for(problem) * math.log(self.support_size(problem)) + self.tol * self.loss_scale(problem)

    def _rounding(self, problem: TransportProblem) -> float:
        return _ROUNDING_RTOL * max(1.0, problem.max_abs_loss)

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False) -> None:
        """Refuse (ValidationError) a full problem of n points past ``max_dense_n``, with the estimate."""
        if not sparse:
            _sizing.refuse_dense(self, n, held=held)

    def _engine(self, problem: TransportProblem) -> _ColumnSoftmax:
        # Before anything of size n^2 is read or allocated.
        self.check_size(problem.n, sparse=bool(problem.cost.is_sparse), held=bool(problem.cost.is_dense))
        xp = resolve_namespace(self.array_namespace)
        return _ColumnSoftmax(problem, xp, self.device, self.gamma_for(problem), self.block_bytes)

    def _keep_plan(self, engine: _ColumnSoftmax) -> bool:
        return engine.n * engine.support <= self.plan_max_entries

    # -- root finding and results

    def _root(self, engine: _ColumnSoftmax, *, eta0: float | None, max_eval: int
              ) -> tuple[_Pass | None, _Pass | None, int, bool]:
        """Safeguarded Newton search for the ``eta`` at which the budget binds.

        Solves ``F(eta) = log <C, Pi(eta)> - log eps = 0`` (``F`` is decreasing; its derivative
        ``-Var/(gamma <C, Pi>)`` comes from the same pass) inside a bracket: Newton steps, capped
        at a factor 4 while the bracket is open (growing geometrically from ``spread / <C,
        Pi(0)>``, or from the warm start ``eta0``), and bisection whenever a step leaves the
        bracket or does not halve ``|F|``.  It stops at the first ``eta`` with ``<C, Pi(eta)> <=
        eps`` and ``eta * (eps - <C, Pi(eta)>) <= tol * spread``; steps from the infeasible side
        aim half that slack past the root so that they land on the feasible side.

        Returns the pass at the smallest feasible ``eta`` seen (None if none), the pass at the
        largest infeasible ``eta`` seen (None if none), the number of full passes and whether the
        stopping rule was met.
        """
        problem = engine.problem
        eps = problem.eps
        stop_at = self.tol * self.loss_scale(problem)
        seen: dict[float, _Pass] = {}

        class _Done(Exception):
            pass

        def ev(eta: float) -> _Pass:
            p = engine.evaluate(eta, curvature=True, final=True)  # weights too: no extra final pass
            seen[eta] = p
            if p.cost <= eps and eta * (eps - p.cost) <= stop_at:
                raise _Done
            return p

        def log_ratio(p: _Pass) -> float:
            return math.log(p.cost / eps) if p.cost > 0.0 else -math.inf

        def newton(p: _Pass) -> float:
            """Newton step on F from p (NaN when F or F' is unusable there)."""
            F = log_ratio(p)
            slope = p.curvature / p.cost if p.cost > 0.0 else 0.0  # -F'(eta)
            if not (math.isfinite(F) and slope > 0.0 and math.isfinite(slope)):
                return math.nan
            x = p.eta + F / slope
            if F > 0.0 and x > 0.0:  # aim half the allowed slack past the root (feasible side)
                x += 0.5 * stop_at / (x * p.curvature)
            return x

        converged = False
        try:
            lo: _Pass | None = None  # largest infeasible eta
            hi: _Pass | None = None  # smallest feasible eta
            p = ev(eta0) if eta0 is not None and 0.0 < eta0 <= _ETA_CEILING else ev(0.0)
            n_shrink = 0
            last_F = math.inf
            bisected = True
            while len(seen) < max_eval:
                if p.cost > eps:
                    lo = p if lo is None or p.eta > lo.eta else lo
                else:
                    hi = p if hi is None or p.eta < hi.eta else hi
                x = newton(p)
                F = abs(log_ratio(p))
                if hi is None:  # grow: at most x4 (from 0: at most the natural scale)
                    cap = _GROWTH * lo.eta if lo.eta > 0.0 else self.loss_scale(problem) / max(lo.cost, 1e-300)
                    x = min(x, cap) if math.isfinite(x) and x > lo.eta else cap
                    if x > _ETA_CEILING:
                        break
                elif lo is None:  # shrink below a feasible warm start: at most /4, then try 0
                    n_shrink += 1
                    floor = hi.eta / _GROWTH
                    x = max(x, floor) if math.isfinite(x) and x < hi.eta else floor
                    if n_shrink > 3:
                        x = 0.0
                else:  # bracketed: Newton if it stays inside and |F| halved, else bisection
                    if hi.eta - lo.eta <= 4.0 * np.finfo(float).eps * hi.eta:
                        break  # the bracket cannot shrink any further
                    if not (lo.eta < x < hi.eta) or (not bisected and F > 0.5 * last_F):
                        x = math.sqrt(lo.eta * hi.eta) if lo.eta > 0.0 and hi.eta > _GROWTH * lo.eta else 0.5 * (lo.eta + hi.eta)
                        bisected = True
                    else:
                        bisected = False
                last_F = F
                if x in seen:
                    break
                p = ev(x)
        except _Done:
            converged = True
        good = [p for p in seen.values() if p.cost <= eps]
        bad = [p for p in seen.values() if p.cost > eps]
        best = min(good, key=lambda p: p.eta) if good else None
        below = max(bad, key=lambda p: p.eta) if bad else None
        if best is not None:
            # Brent may stop on its own tolerance (a bracket at rounding level) first.
            converged = converged or best.eta * (eps - best.cost) <= stop_at
        return best, below, len(seen), converged

    def _result(self, engine: _ColumnSoftmax, at: _Pass | float, *, converged: bool, info: dict,
                partner: _Pass | float | None = None, n_steps: int = 0) -> TransportResult:
        """The plan at ``at`` (a pass with weights, or an ``eta``), made to meet the budget exactly.

        With ``partner`` (an ``eta`` below, whose plan is over budget: the other end of a bracket
        that could not be narrowed further) the two plans are mixed so that the budget binds, as
        the exact entropic optimum does.  Otherwise a plan over budget is mixed with the identity
        plan (staying put is free).  ``n_iter`` is ``n_steps`` plus the full passes made.
        """
        problem = engine.problem
        eps, n = problem.eps, problem.n
        keep = self._keep_plan(engine)

        def complete(p: _Pass | float) -> _Pass:
            if isinstance(p, _Pass) and p.weights is not None and (p.plan is not None or not keep):
                return p
            eta = p.eta if isinstance(p, _Pass) else p
            return engine.evaluate(eta, final=True, keep_plan=keep)

        final = complete(at)
        eta = final.eta
        weights, plan, cost = final.weights, final.plan, final.cost

        def dual_value(p: _Pass) -> float:
            return (0.0 if math.isinf(p.eta) else eps * p.eta) + p.vmax

        dual_objective = dual_value(final)
        t = 0.0  # share of the identity plan
        lam = 0.0  # share of the partner's plan
        if partner is not None and cost <= eps:
            other = complete(partner)
            if other.cost > eps:
                lam = (eps - cost) / (other.cost - cost)
                while lam > 0.0 and cost + lam * (other.cost - cost) > eps:
                    lam = float(np.nextafter(lam, 0.0))
                weights = (1.0 - lam) * weights + lam * other.weights
                cost = cost + lam * (other.cost - cost)
                if plan is not None:
                    plan = (1.0 - lam) * plan + lam * other.plan
                dual_objective = min(dual_objective, dual_value(other))
        if cost > eps:
            # (1 - t) Pi(eta) + t I/n costs (1 - t) cost: feasible for t = 1 - eps / cost,
            # nudged up until the computed cost is within the budget.
            t = 1.0 - eps / cost
            while t < 1.0 and (1.0 - t) * cost > eps:
                t = float(np.nextafter(t, 2.0))
            weights = (1.0 - t) * weights + t * problem.empirical_weights()
            cost = (1.0 - t) * cost
            if plan is not None:
                plan = (1.0 - t) * plan + t * sp.eye_array(n, format="csr") / n
        objective = float(np.sum(weights * problem.losses))
        info = dict(info)
        info.update(
            gamma=engine.gamma,
            namespace=namespace_name(engine.xp),
            entropy=final.entropy,
            budget_slack=eps - cost,
            identity_share=t,
            partner_share=lam,
            n_passes=engine.n_passes,
            gap_bound=max(0.0, dual_objective - objective),
            a_priori_bound=self._entropic_tolerance(problem),
        )
        return TransportResult(
            weights=weights,
            objective=objective,
            transport_cost=float(cost),
            eta=float(eta),
            plan=plan,
            dual_objective=float(dual_objective),
            n_iter=int(n_steps + engine.n_passes),
            converged=bool(converged),
            solver=self.name,
            info=info,
        )

    def _solve_by_root(self, engine: _ColumnSoftmax, *, eta0: float | None, info: dict, n_steps: int = 0
                       ) -> TransportResult:
        """Safeguarded Newton root find, then the plan (mixed across the bracket if not converged)."""
        best, below, _, converged = self._root(engine, eta0=eta0, max_eval=self.max_iter)
        info = dict(info, bracket=(below.eta if below is not None else math.nan,
                                   best.eta if best is not None else math.nan))
        if best is None:  # no feasible eta below the ceiling: only the identity mix is left
            return self._result(engine, below, converged=False, info=info, n_steps=n_steps)
        if converged or below is None:
            return self._result(engine, best, converged=converged, info=info, n_steps=n_steps)
        result = self._result(engine, best, converged=False, info=info, partner=below, n_steps=n_steps)
        # The mix across the bracket binds the budget like the entropic optimum; it counts as
        # converged when its certificate meets the a-priori bound.
        if result.info["gap_bound"] <= self._entropic_tolerance(engine.problem):
            result = dataclasses.replace(result, converged=True)
        return result


# ---------------------------------------------------------------------------------------------
# The solvers


class EntropicSolver(_EntropicBase):
    """Entropic-regularised transport plan with ``eta`` from a bracketed root find (Algorithms 4-5).

    For a multiplier ``eta`` the plan is ``Pi(eta)_ij = (1/n) softmax_i((R_ij - eta C_ij) / gamma)``
    in every column; ``eta`` is the root of ``<C, Pi(eta)> = eps`` (a decreasing function), or 0
    when ``<C, Pi(0)> <= eps``, or ``+inf`` when ``eps = 0`` (only zero-cost pairs carry mass).

    Parameters
    ----------
    gamma : float or None, default None
        Absolute entropic regularisation (in loss units).  When None, ``gamma_rel`` is used.
    gamma_rel : float, default 1e-3
        Regularisation relative to the loss spread: ``gamma = gamma_rel * (max(losses) -
        min(losses))`` (``gamma_rel`` itself when every loss is equal), so the same value fits
        every round and loss.  The LP gap is at most ``gamma * log n``.
    tol : float, default 1e-9
        Root tolerance in objective units relative to the loss spread: the search stops at the
        first ``eta`` with ``<C, Pi(eta)> <= eps`` and ``eta * (eps - <C, Pi(eta)>) <= tol *
        spread`` (the objective that an unused budget can cost).
    max_iter : int, default 100
        Most full passes (bracketing included); about 10 are typical from a cold start (up to
        about 25 with many exact ties), fewer from a warm one.  If the limit is hit, the plans at the two ends of the bracket are mixed
        so that the budget binds (or, without a feasible end, the last plan is mixed with the
        identity plan): still feasible, ``converged`` tells whether ``info["gap_bound"]`` meets
        the a-priori bound.
    block_bytes : int, default 8 MiB
        Memory of one block of columns (float64); about six temporaries of that size are live.
    array_namespace : None or str or module, default None
        Array library that does the per-column work: None or ``"numpy"``, ``"torch"``, ``"cupy"``,
        ``"array_api_strict"``, or any namespace array-api-compat supports (an import name or a
        module).  The problem's NumPy arrays are copied to it (zero-copy on CPU for torch),
        everything is computed in float64, and the results come back as NumPy.
    device : optional
        Device for the arrays, passed to the namespace's ``asarray`` (e.g. ``"cuda"`` for torch);
        None for the library's default.
    plan_max_entries : int, default 4_000_000
        The plan (a scipy CSR array, entropic plans are dense) is returned only when it has at
        most this many entries (``n * n``, or ``n * m`` for a sparse cost); otherwise
        ``plan=None`` and only the weights are kept.
    max_dense_n : int or None, default 10000
        Largest n accepted on the full (dense) problem; larger ones are refused before any cost
        is read, with the estimated time and memory per round (about 500 ns per cost entry on a
        blocked cost: ~50 s at n = 10000, ~13 min at n = 40000; see
        :mod:`budro.solvers._sizing`) and what fits instead (``dual``, ``n_neighbors``).  None: no
        limit.  Sparse costs are never limited.

    Notes
    -----
    Guarantee.  Marginals hold to rounding and ``transport_cost <= eps`` as computed.
    ``dual_objective`` is the LP's dual function ``g(eta) = eps eta + (1/n) sum_j max_i (R_ij -
    eta C_ij)`` (an upper bound on the LP optimum) and ``info["gap_bound"] = dual_objective -
    objective``, which is at most ``eta (eps - transport_cost) + gamma * info["entropy"] <= tol *
    spread + gamma log n`` when converged.  With a sparse cost of m neighbours the bound is
    ``gamma log m`` against the LP over the listed pairs.

    The search starts with one pass at ``eta = 0`` (done if within budget), or at the warm start
    ``eta0``.  It then takes Newton steps on ``log <C, Pi(eta)> - log eps``, whose derivative
    ``-Var_p(C) / (gamma <C, Pi>)`` comes from the same pass: capped at a factor 4 while no
    feasible ``eta`` is known (from 0: at most to ``spread / <C, Pi(0)>``), and replaced by
    bisection of the bracket when a step leaves it or fails to halve the residual.  Steps from
    the infeasible side aim half the allowed slack past the root, so the search ends on the
    feasible side.  Should the bracket shrink to rounding level first (vanishing ``gamma``: the
    expected cost then jumps between adjacent floats), the plans at its ends are mixed so that
    the budget binds, as at the exact entropic optimum.  Every pass costs O(n^2) exponentials
    (O(n m) for a sparse cost) and also yields the weights, so no extra pass is needed unless the
    plan itself is returned.

    ``info`` holds ``gamma``, ``entropy`` (mean column entropy, nats), ``gap_bound``,
    ``a_priori_bound`` (``gamma log n + tol * spread``), ``budget_slack`` (``eps -
    transport_cost``), ``bracket`` (largest infeasible and smallest feasible ``eta`` seen),
    ``partner_share`` (weight of the bracket's other end in the final mix, usually 0),
    ``identity_share`` (usually 0), ``n_passes`` and ``namespace``.
    """

    name = "entropic"
    guarantee = (
        "Feasible (column marginals 1/n, <C, Pi> <= eps as computed) and within gamma*log(n) + "
        "tol*spread of the LP optimum when converged (gamma*log(m) of the LP over the listed pairs for "
        "a sparse m-neighbour cost); info['gap_bound'] certifies the gap of every result."
    )
    exact = False

    def __init__(
        self,
        gamma: float | None = None,
        gamma_rel: float = DEFAULT_GAMMA_REL,
        tol: float = 1e-9,
        max_iter: int = 100,
        block_bytes: int = DEFAULT_ENTROPIC_BLOCK_BYTES,
        array_namespace: Any = None,
        device: Any = None,
        plan_max_entries: int = 4_000_000,
        max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["entropic"],
    ):
        self._init_common(gamma, gamma_rel, tol, block_bytes, array_namespace, device, plan_max_entries)
        self.max_iter = _check_int("max_iter", max_iter, low=1, owner=type(self).__name__)
        self.max_dense_n = _sizing.check_max_dense_n(max_dense_n, type(self).__name__)

    def __repr__(self) -> str:
        g = f"gamma={self.gamma:g}" if self.gamma is not None else f"gamma_rel={self.gamma_rel:g}"
        ns = "" if self.array_namespace is None else f", array_namespace={namespace_name(self.array_namespace)!r}"
        return f"EntropicSolver({g}, tol={self.tol:g}, max_iter={self.max_iter}{ns})"

    def objective_tolerance(self, problem: TransportProblem) -> float:
        """``gamma log(n) + tol * spread`` (``log m`` for a sparse cost) plus rounding."""
        return self._entropic_tolerance(problem) + self._rounding(problem)

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        engine = self._engine(problem)
        if problem.eps == 0.0:
            return self._result(engine, math.inf, converged=True, info={})
        return self._solve_by_root(engine, eta0=eta0, info={})


class EntropicSGDSolver(_EntropicBase):
    """Entropic plan with ``eta`` from stochastic gradient steps over minibatches of columns (Algorithm 7).

    The entropic dual ``D(eta) = eps eta + (1/n) sum_j gamma log sum_i exp((R_ij - eta C_ij)/gamma)``
    is an average over columns; its minibatch gradient is ``eps - mean_{j in batch} E_p[C_.j]``.
    Each step samples ``batch_size`` distinct columns uniformly at random (all of them when
    ``batch_size >= n``), and moves

        ``v <- momentum * v + lr_t * grad / h_t``,  ``eta <- clip(eta - v)``,

    where ``h_t`` is a running average of the minibatch curvature ``D''`` (``mean Var_p(C) /
    gamma``, from the same pass), so ``learning_rate`` is dimensionless (1 is a Newton step), and
    ``lr_t = learning_rate / sqrt(1 + t)``.  ``eta`` stays >= 0 and changes by at most a factor 4
    per step.  The result is the average of the second half of the iterates (Polyak-Ruppert).

    The plan at the SGD ``eta`` is then computed in one full pass and made feasible: if it is over
    budget it is mixed with the identity plan, ``Pi = (1 - t) Pi(eta) + t I / n`` with ``t = 1 -
    eps / <C, Pi(eta)>`` (staying put is free, so this meets the budget exactly and keeps the
    marginals; it is the cheapest repair, one pass, and the loss it causes is included in the
    certificate).  The same pass gives the certificate ``gap_bound = g(eta) - objective``.  With
    ``polish=True`` a result whose certificate exceeds the entropic solver's a-priori bound
    ``gamma log n + tol * spread`` is replaced by a bracketing root find warm-started at the SGD
    ``eta`` (as :class:`EntropicSolver`), so the guarantee of ``"entropic"`` holds whenever
    ``converged``.

    Parameters
    ----------
    gamma, gamma_rel, tol, block_bytes, array_namespace, device, plan_max_entries
        As for :class:`EntropicSolver`.
    batch_size : int, default 256
        Columns per step (at most n).
    n_steps : int, default 50
        SGD steps (``eta0``, last round's ``eta``, is the starting point when given, else 0).
    learning_rate : float, default 1.0
        Dimensionless step (a multiple of the Newton step), in (0, 4].
    momentum : float, default 0.5
        Heavy-ball momentum in [0, 1).
    random_state : int, numpy Generator or None, default 0
        Seeds the column sampling.  An integer gives the same result on every call; a Generator is
        consumed; None draws fresh entropy (not reproducible).
    polish : bool, default True
        Fall back to a warm-started root find when the SGD plan's certified gap is above the
        a-priori bound.  With ``polish=False`` the result is feasible and certified by
        ``info["gap_bound"]``, with no a-priori bound (``converged`` is False when that
        certificate is above it).
    max_iter : int, default 100
        Most full passes of the polishing root find.
    max_dense_n : int or None, default 10000
        As for :class:`EntropicSolver` (about 400 ns per cost entry per round).

    Notes
    -----
    Algorithm 7 as printed sums the minibatch gradients; the mean is used here, so the step does
    not grow with ``batch_size``.  ``n_iter`` counts SGD steps plus the full passes after them.
    ``info`` holds what :class:`EntropicSolver` reports plus ``eta_sgd``, ``sgd_gap_bound`` (the
    certificate of the SGD plan) and ``polished``.
    """

    name = "entropic-sgd"
    guarantee = (
        "Feasible (column marginals 1/n, <C, Pi> <= eps, over-budget SGD plans are mixed with the identity); "
        "with polish=True (default) and converged, within gamma*log(n) + tol*spread of the LP optimum like "
        "'entropic'; info['gap_bound'] certifies every result."
    )
    exact = False

    def __init__(
        self,
        gamma: float | None = None,
        gamma_rel: float = DEFAULT_GAMMA_REL,
        batch_size: int = 256,
        n_steps: int = 50,
        learning_rate: float = 1.0,
        momentum: float = 0.5,
        random_state: Any = 0,
        polish: bool = True,
        tol: float = 1e-9,
        max_iter: int = 100,
        block_bytes: int = DEFAULT_ENTROPIC_BLOCK_BYTES,
        array_namespace: Any = None,
        device: Any = None,
        plan_max_entries: int = 4_000_000,
        max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["entropic-sgd"],
    ):
        owner = type(self).__name__
        self._init_common(gamma, gamma_rel, tol, block_bytes, array_namespace, device, plan_max_entries)
        self.max_dense_n = _sizing.check_max_dense_n(max_dense_n, owner)
        self.batch_size = _check_int("batch_size", batch_size, low=1, owner=owner)
        self.n_steps = _check_int("n_steps", n_steps, low=0, owner=owner)
        self.learning_rate = _check_real("learning_rate", learning_rate, low=0.0, high=4.0, owner=owner)
        self.momentum = _check_real("momentum", momentum, low=0.0, high=1.0 - 1e-12, low_open=False, owner=owner)
        if not (random_state is None or isinstance(random_state, (numbers.Integral, np.random.Generator))) or (
            isinstance(random_state, bool)
        ):
            raise ValidationError(f"{owner}: random_state must be an integer, a numpy Generator or None, got {random_state!r}")
        self.random_state = random_state
        if not isinstance(polish, (bool, np.bool_)):
            raise ValidationError(f"{owner}: polish must be True or False, got {polish!r}")
        self.polish = bool(polish)
        self.max_iter = _check_int("max_iter", max_iter, low=1, owner=owner)

    def __repr__(self) -> str:
        g = f"gamma={self.gamma:g}" if self.gamma is not None else f"gamma_rel={self.gamma_rel:g}"
        return (
            f"EntropicSGDSolver({g}, batch_size={self.batch_size}, n_steps={self.n_steps}, "
            f"learning_rate={self.learning_rate:g}, momentum={self.momentum:g}, random_state={self.random_state!r}, "
            f"polish={self.polish})"
        )

    def objective_tolerance(self, problem: TransportProblem) -> float:
        """As ``entropic`` with ``polish=True``; no a-priori bound (inf) without polishing."""
        if not self.polish:
            return math.inf
        return self._entropic_tolerance(problem) + self._rounding(problem)

    def _sgd(self, engine: _ColumnSoftmax, eta0: float | None) -> float:
        """Algorithm 7 with curvature-scaled steps; returns the average of the last half of the iterates."""
        problem = engine.problem
        n, eps = problem.n, problem.eps
        rng = self.random_state if isinstance(self.random_state, np.random.Generator) else np.random.default_rng(
            self.random_state
        )
        eta = float(eta0) if eta0 is not None and eta0 <= _ETA_CEILING else 0.0
        batch = min(self.batch_size, n)  # the full gradient when batch_size >= n
        h_avg = math.nan
        v = 0.0
        iterates = [eta]
        for t in range(self.n_steps):
            cols = np.sort(rng.choice(n, size=batch, replace=False)) if batch < n else None
            p = engine.evaluate(eta, cols, curvature=True)
            grad = eps - p.cost  # minibatch gradient of D at eta
            if p.curvature > 0.0 and math.isfinite(p.curvature):
                h_avg = p.curvature if math.isnan(h_avg) else 0.8 * h_avg + 0.2 * p.curvature
            lr = self.learning_rate / math.sqrt(1.0 + t)
            if h_avg > 0.0:  # False while NaN
                v = self.momentum * v + lr * grad / h_avg
            else:  # no curvature seen yet: move as far as the clipping below allows
                v = math.copysign(math.inf, grad) if grad != 0.0 else 0.0
            # At most a factor 4 per step; from 0 at most to the natural scale spread / <C, Pi>.
            ceiling = _GROWTH * eta if eta > 0.0 else self.loss_scale(problem) / max(p.cost, 1e-300)
            new = min(max(eta - v, eta / _GROWTH, 0.0), ceiling, _ETA_CEILING)
            v = eta - new  # the step actually taken carries the momentum
            eta = new
            iterates.append(eta)
        engine.n_passes = 0  # full-batch steps are counted as steps, not passes
        return float(np.mean(iterates[len(iterates) // 2 :]))

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        engine = self._engine(problem)
        if problem.eps == 0.0:
            return self._result(engine, math.inf, converged=True,
                                info={"eta_sgd": math.inf, "sgd_gap_bound": math.nan, "polished": False})
        eta_sgd = self._sgd(engine, eta0)
        result = self._result(engine, eta_sgd, converged=True, info={"eta_sgd": eta_sgd, "polished": False},
                              n_steps=self.n_steps)
        result.info["sgd_gap_bound"] = result.info["gap_bound"]
        if result.info["gap_bound"] <= self._entropic_tolerance(problem):
            return result
        if not self.polish:  # stopped by n_steps with a certificate above the a-priori bound
            return dataclasses.replace(result, converged=False)
        info = {"eta_sgd": eta_sgd, "polished": True, "sgd_gap_bound": result.info["gap_bound"]}
        return self._solve_by_root(engine, eta0=eta_sgd if eta_sgd > 0.0 else None, info=info, n_steps=self.n_steps)
