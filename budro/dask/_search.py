"""The client's side of a distributed BuDRO round: calls to every shard, and the exact search over
the dual variable eta in which only scalars, counts and short lists of breakpoints cross the
network.

The transport dual of the union of the shards' neighbour lists is

    g(eta) = eps * eta + (1/N) sum_a sum_{j in shard a} max_i (R_ij - eta C_ij),

a sum over shards.  Each shard prunes its lists to their upper hulls (budro's own
:func:`~budro.solvers._dual_sparse.list_candidates` with the *global* tie margin) and keeps the
hulls' breakpoints sorted with their cumulative cost drops ``F_a``.  The minimiser is the first
breakpoint ``e`` at which ``F(e) = sum_a F_a(e)`` reaches ``need = sum_a top_a - N eps``
(DualSolver's ``breakpoint_eta`` on the union), found by a distributed selection: each shard sends
a few quantiles of its breakpoints inside the current bracket, the client asks every shard for
``F_a`` at those values, keeps the bracket between two consecutive ones, and once every shard has
few breakpoints left inside, they send them with their cumulative drops and the client reads the
first one off exactly.  That ``eta`` is then certified by one evaluation (the subgradient of ``g``
contains 0: ``mean c_lo <= eps <= mean c_hi``), as DualSolver certifies it; should rounding near a
tie defeat the certificate, DualSolver's own bracketing and Kelley cutting plane run on sums
returned by the shards.  The primal plan is DualSolver's: every column to its cheapest argmax row,
columns switched in order (shard by shard) to their most expensive argmax row until the budget
binds, the last one fractionally, one global budget split across shards.
"""

from __future__ import annotations

import math
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from budro.exceptions import BudroError
from budro.solvers import _dual_plan

#: Quantiles of its breakpoints a shard sends per step of the selection (2 KiB).
N_QUANTILES = 256
#: A shard sends its breakpoints themselves once it has at most this many inside the bracket
#: (64 KiB): one step of quantiles leaves about n_edges / 256 of them, so up to ~10^6 breakpoints
#: per shard (~ 4 x 10^5 rows) the search takes two calls after the hulls, three beyond.
MAX_PAIRS = 4096


class ClusterError(BudroError, RuntimeError):
    """A worker or the client failed during a distributed fit (see the message); no model is kept."""


@dataclass
class Traffic:
    """Payload bytes of the actor calls (pickled arguments sent, pickled results received)."""

    sent: int = 0
    received: int = 0
    calls: int = 0
    seconds: float = 0.0

    def reset(self) -> "Traffic":
        out = Traffic(self.sent, self.received, self.calls, self.seconds)
        self.sent = self.received = self.calls = 0
        self.seconds = 0.0
        return out


class Shards:
    """The actors of a fit, called all at once (or one by one) with their payload counted."""

    def __init__(self, actors: Sequence[Any], addresses: Sequence[str], timeout: float | None = None,
                 client: Any = None):
        self.client = client
        self.actors = list(actors)
        self.addresses = list(addresses)
        self.traffic = Traffic()
        self.timeout = timeout

    def __len__(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args: Any, per_shard: Sequence[tuple] | None = None) -> list:
        """``method`` on every shard (same ``args``, or ``per_shard[a]``), in parallel; results in
        shard order.  A lost worker or a failing method raises :class:`ClusterError`."""
        t0 = time.perf_counter()
        arg_list = [per_shard[a] if per_shard is not None else args for a in range(len(self.actors))]
        failed: list[str] = []
        try:
            futures, first = [], None
            for actor, address, a in zip(self.actors, self.addresses, arg_list):
                try:
                    futures.append(getattr(actor, method)(*a))
                except Exception as exc:  # noqa: BLE001 - collected, the first one is raised below
                    futures.append(None)
                    failed.append(address)
                    first = first or exc
            results = []
            for address, f in zip(self.addresses, futures):
                if f is None:
                    continue
                try:
                    results.append(f.result(timeout=self.timeout) if self.timeout else f.result())
                except Exception as exc:  # noqa: BLE001 - collected, the first one is raised below
                    failed.append(address)
                    first = first or exc
            if first is not None:
                raise first
        except BudroError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure of a worker ends the fit here
            if self.client is not None and self.client.status != "running":
                raise ClusterError(
                    f"the Dask client was closed or lost its scheduler during the distributed fit (in {method}(), "
                    f"client status {self.client.status!r}); the shards were released with it and no model was kept; "
                    f"fit again with a connected client") from exc
            raise ClusterError(
                f"the distributed fit failed in {method}() on the worker(s) {', '.join(failed or self.addresses)}: "
                f"{type(exc).__name__}: {exc}; no model was kept (a lost worker cannot be replaced mid-fit: its "
                f"rows, booster and margins lived only there); fit again"
            ) from exc
        self.traffic.calls += len(self.actors)
        self.traffic.sent += sum(len(pickle.dumps((method, a), protocol=5)) for a in arg_list)
        self.traffic.received += sum(len(pickle.dumps(r, protocol=5)) for r in results)
        self.traffic.seconds += time.perf_counter() - t0
        return results


@dataclass
class Point:
    """``g`` at one eta, summed over the shards (what DualSolver's _DualPoint gives, as sums)."""

    eta: float
    value: float
    sum_lo: float
    sum_hi: float
    n: int
    gains: tuple = ()  # per shard: summed gains of switching its columns from lo to hi

    @property
    def mean_lo(self) -> float:
        return self.sum_lo / self.n

    @property
    def mean_hi(self) -> float:
        return self.sum_hi / self.n


@dataclass
class Solve:
    """One round's distributed solve: eta*, the plan's choice of rows and how it was found."""

    eta: float
    dual_objective: float
    cheap: Any
    dear: Any
    switch: bool
    certified: bool
    stalled: bool
    n_eval: int
    selection_steps: int
    eta_guess: float
    info: dict = field(default_factory=dict)


def select_breakpoint(shards: Shards, hulls: list, n: int, eps: float) -> tuple[float, int]:
    """The minimiser of g read off the union of the shards' hull breakpoints (see the module
    docstring); returns ``(eta, selection steps)``."""
    top = sum(h[0] for h in hulls)
    need = top - n * eps
    n_edges = sum(h[1] for h in hulls)
    if need <= 0.0 or n_edges == 0:
        return 0.0, 0
    if sum(h[5] for h in hulls) < need:  # rounding: DualSolver takes the largest breakpoint then
        return max(h[2] for h in hulls), 0
    lo, hi = -math.inf, math.inf
    steps = 0
    quantiles = [h[3] for h in hulls]
    while True:
        windows = shards.call("window", lo, hi, N_QUANTILES, MAX_PAIRS) if quantiles is None else None
        steps += windows is not None
        if windows is not None and all(w[3] is not None for w in windows):
            return _exact_pick(windows, need), steps
        values = quantiles if quantiles is not None else [w[2] for w in windows]
        quantiles = None
        probes = sorted({v for vs in values for v in vs if lo < v <= hi})
        if not probes:  # cannot happen with breakpoints inside (lo, hi]; stop rather than loop
            raise ClusterError(f"the distributed breakpoint search found no breakpoint in ({lo}, {hi}]")
        F = np.sum(np.asarray(shards.call("cumulative", probes), dtype=np.float64), axis=0)
        steps += 1
        reached = F >= need  # F is non-decreasing in the probe
        k = int(np.argmax(reached)) if reached.any() else len(probes)
        if k == 0 and probes[0] == hi:  # every shard's breakpoints in (lo, hi] sit at hi itself
            return float(hi), steps
        if k < len(probes):
            hi = probes[k]
        if k > 0:
            lo = probes[k - 1]


def _exact_pick(windows: list, need: float) -> float:
    """The first breakpoint v in the bracket with ``sum_a F_a(v) >= need``, from every shard's
    breakpoints in the bracket and their cumulative drops."""
    values = np.unique(np.concatenate([np.asarray(w[2], dtype=np.float64) for w in windows]))
    F = np.zeros(values.size)
    for f_lo, _, e, d in windows:
        if not len(e):  # no breakpoint of this shard in the bracket
            F += f_lo
            continue
        e = np.asarray(e, dtype=np.float64)
        d = np.asarray(d, dtype=np.float64)
        idx = np.searchsorted(e, values, side="right")
        F += np.where(idx > 0, d[np.maximum(idx - 1, 0)], f_lo)
    reach = np.flatnonzero(F >= need)
    return float(values[reach[0]] if reach.size else values[-1])


def hulls_and_solve(shards: Shards, scale: float, n: int, eps: float, max_iter: int,
                    floors: _dual_plan.EtaFloor | None = None) -> tuple[list, Solve, float]:
    """This round's hulls on every shard and its eta* (:func:`solve_round`): ``(hulls, solve,
    seconds of the hulls)``.  ``floors`` (kept by the caller from round to round): the hulls are
    made exact from its floor under the last rounds' eta* (fewer pairs, as DualSolver's lists);
    should eta* lie below it, every shard makes its hulls again without one."""
    t0 = time.perf_counter()
    hulls = shards.call("hulls", scale, eps, N_QUANTILES, floors.next() if floors is not None else 0.0)
    seconds = time.perf_counter() - t0
    try:
        solve = solve_round(shards, hulls, n, eps, max_iter)
    except _dual_plan.BelowFloor:
        floors.missed()
        t0 = time.perf_counter()
        hulls = shards.call("hulls", scale, eps, N_QUANTILES, 0.0)
        seconds += time.perf_counter() - t0
        solve = solve_round(shards, hulls, n, eps, max_iter)
    if floors is not None and solve.certified:
        floors.certified(solve.eta)
    return hulls, solve, seconds


def solve_round(shards: Shards, hulls: list, n: int, eps: float, max_iter: int) -> Solve:
    """eta* for this round: the breakpoint selection, certified by one evaluation, else
    DualSolver's bracketing and cutting plane on the shards' sums.  Hulls exact from a floor
    (``hulls[a][7]``) are evaluated at eta >= floor only: :class:`_dual_plan.BelowFloor` is raised
    where the search would go below it (the minimiser lies there)."""
    floor = max((h[7] for h in hulls), default=0.0)
    eta0, steps = select_breakpoint(shards, hulls, n, eps)
    n_eval = 0
    kept: list[float] = []

    def probe(eta: float) -> tuple[Point, str]:
        nonlocal n_eval
        if eta < floor:
            raise _dual_plan.BelowFloor
        n_eval += 1
        kept_now = [k for k in kept]
        replies = shards.call("evaluate", float(eta), kept_now)
        kept.append(float(eta))
        point = Point(eta=float(eta), value=eps * eta + sum(r[0] for r in replies) / n,
                      sum_lo=sum(r[1] for r in replies), sum_hi=sum(r[2] for r in replies), n=n,
                      gains=tuple((r[1], r[4]) for r in replies))
        return point, _dual_plan.position(point, eps)  # Point has DualSolver's mean_lo / mean_hi

    def budget_left() -> bool:
        return n_eval < max_iter

    # DualSolver's bracketing from the breakpoint guess eta0 (budro.solvers._dual_plan.bracket).
    found, a, b = _dual_plan.bracket(probe, budget_left, eta0)

    def meet(a: Point, b: Point) -> float:  # the supporting lines' crossing, from the shards' sums
        sums = shards.call("kelley", a.eta, b.eta)
        dr = sum(s[0] for s in sums)
        dc = sum(s[1] for s in sums)
        return (dr / n) / (dc / n) if dc > 0.0 else math.nan

    stalled = False
    if found is None:
        found, a, b, stalled = _dual_plan.cutting_plane(probe, budget_left, a, b, meet)
    if found is not None:
        cheap, dear, switch, reported = (found.eta, "lo"), (found.eta, "hi"), found.eta > 0.0, found
    elif a is not None and b is not None:
        cheap, dear, switch = (b.eta, "hi"), (a.eta, "lo"), True
        reported = a if a.value <= b.value else b
    elif a is not None:
        cheap, dear, switch, reported = None, (a.eta, "lo"), True, a
    else:
        assert b is not None
        cheap, dear, switch, reported = (b.eta, "hi"), (b.eta, "hi"), False, b
    return Solve(eta=reported.eta, dual_objective=reported.value, cheap=cheap, dear=dear, switch=switch,
                 certified=found is not None, stalled=stalled, n_eval=n_eval, selection_steps=steps,
                 eta_guess=eta0, info={"bracket": (a.eta if a else math.nan, b.eta if b else math.nan),
                                       "split_sums": found.gains if found is not None else None,
                                       "floor": floor})


def budget_shares(shards: Shards, solve: Solve, n: int, eps: float) -> list[tuple]:
    """Each shard's budget for the switching step (one global split, shards in order): the
    columns of earlier shards switch first, as DualSolver switches columns in index order."""
    if len(shards) == 1:
        return [("eps", eps)]
    sums = solve.info.get("split_sums") or shards.call("split_sums", solve.cheap, solve.dear)
    deficit = n * eps - sum(s[0] for s in sums)
    out = []
    for _, gains in sums:
        if not solve.switch or deficit <= 0.0:
            out.append(("share", 0.0))
        elif deficit >= gains:
            out.append(("share", math.inf))
            deficit -= gains
        else:
            out.append(("share", deficit))
            deficit = 0.0
    return out
