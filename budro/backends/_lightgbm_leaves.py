"""LightGBM's trees grown under a leaf cap: the trees of the requested ``num_leaves``, without
paying for slots they never fill.

LightGBM's serial tree learner does work in proportion to ``num_leaves`` at every split: it
picks the leaf to split among ``num_leaves`` slots (``ArrayArgs<SplitInfo>::ArgMax`` over
``best_split_per_leaf_`` in ``SerialTreeLearner::Train``), resets as many slots for every
tree, and sizes its histogram pool and each tree's arrays by it.  The paper's depth-14 trees
translate to ``num_leaves = 2**14`` while Adult's trees have 700-1100 leaves, so every split
scans 16384 slots: the same tree took 32-37 ms under 16384 and 12-14 ms under 2048 (Adult,
LightGBM 4.7, two threads).

Why the trees are the same.  The learner grows leaf-wise: each step splits the leaf whose best
split has the largest gain, and it stops when no gain is positive (or after ``num_leaves - 1``
splits).  Under a cap ``c`` below the requested ``N`` every step is the step ``N`` takes (the
slots past the tree's leaves hold no split, and with ``histogram_pool_size <= 0`` the pool keeps
``c`` histograms, more than the tree has leaves, as it keeps ``N``) until the capped loop ends:
a tree with fewer than ``c`` leaves stopped for lack of gain (or of depth) and is the tree ``N``
grows; a tree with exactly ``c`` leaves may have been cut.  That round is undone (LightGBM's
rollback) and grown again under a cap four times larger (at most ``N``).  A cap of at least
``2**max_depth`` never cuts anything: no tree has more leaves.

The rollback subtracts the tree's outputs from LightGBM's training score; where that does not
give back the score before the round to the bit, the booster recomputes its score tree by tree
from a ``Dataset`` of the same rows (``LGBM_BoosterResetTrainingData``), adding each tree's
outputs in the order training added them: the same score to the bit.

Capped growth is used only where nothing else in LightGBM depends on ``num_leaves`` or on a
random state that a new ``Dataset`` would restart: not with bagging, feature fractions below 1,
extra trees or monotone constraints (:func:`cap_applies`).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Callable

import numpy as np

#: The first cap (where the requested num_leaves is larger).
FIRST_CAP = 2048
#: A cut tree is grown again under a cap this many times larger.
GROWTH = 4

_LEAVES = re.compile(rb"\nnum_leaves=(\d+)")


def effective_leaves(params: dict[str, Any]) -> int:
    """The most leaves a tree can have: ``num_leaves`` (LightGBM's default 31), at most
    ``2**max_depth`` where ``max_depth > 0``."""
    n = int(params.get("num_leaves", 31))
    depth = int(params.get("max_depth", -1))
    if 0 < depth < 62:
        n = min(n, 1 << depth)
    return n


def cap_applies(params: dict[str, Any]) -> bool:
    """Whether the trees may be grown under a cap with these (native) parameters: no random draw
    that a new training ``Dataset`` restarts (bagging, feature fractions, extra trees) and no
    monotone constraints (whose per-leaf state LightGBM sizes by ``num_leaves``)."""
    if int(params.get("bagging_freq", 0)) > 0 and float(params.get("bagging_fraction", 1.0)) < 1.0:
        return False
    if float(params.get("feature_fraction", 1.0)) < 1.0 or float(params.get("feature_fraction_bynode", 1.0)) < 1.0:
        return False
    if bool(params.get("extra_trees", False)):
        return False
    monotone = params.get("monotone_constraints")
    if monotone is not None and (not isinstance(monotone, (list, tuple, str)) or len(monotone) > 0):
        return False
    return True


def first_cap(params: dict[str, Any]) -> int | None:
    """The ``num_leaves`` to create the training booster with, or None to grow uncapped."""
    full = effective_leaves(params)
    requested = int(params.get("num_leaves", 31))
    if not cap_applies(params):
        return None
    cap = min(full, FIRST_CAP)
    return cap if cap < requested else None


class LeafCap:
    """The cap of one fit's training booster: checks each round's trees and grows a cut round
    again under a larger cap.

    ``lib``/``check``: LightGBM's ctypes library and its error check; ``booster``: the Python
    ``lightgbm.Booster`` (its handle is read at each call); ``cap``: the ``num_leaves`` the booster
    was created with; ``full``: the most leaves a tree can have under the requested parameters
    (:func:`effective_leaves`); ``score_size``: rows times trees per round."""

    def __init__(self, lib, check: Callable, booster, cap: int, full: int, score_size: int):
        self._lib, self._check, self._booster = lib, check, booster
        self.cap, self.full = int(cap), int(full)
        self._score_size = int(score_size)
        self._text = np.empty(1 << 18, dtype=np.uint8)
        self._length = ctypes.c_int64(0)
        #: (round, cap before, cap after, whether the score was recomputed) for each round grown
        #: again under a larger cap (round 0: f_0); for tests and profiles
        self.events: list[tuple[int, int, int, bool]] = []
        self.largest = 0  # the most leaves of a tree so far

    @property
    def active(self) -> bool:
        """Whether a tree can still be cut (the cap is below the most leaves a tree can have)."""
        return self.cap < self.full

    def iteration(self) -> int:
        """The booster's rounds so far."""
        out = ctypes.c_int(0)
        self._check(self._lib.LGBM_BoosterGetCurrentIteration(self._booster._handle, ctypes.byref(out)))
        return out.value

    def last_leaves(self, last: int) -> int:
        """The most leaves among the trees of round ``last`` (from their model text: LightGBM's C
        API has no call that gives a tree's leaf count)."""
        handle = self._booster._handle
        for _ in range(2):
            size = self._text.size
            self._check(self._lib.LGBM_BoosterSaveModelToString(
                handle, ctypes.c_int(last), ctypes.c_int(1), ctypes.c_int(0),
                ctypes.c_int64(size), ctypes.byref(self._length), ctypes.c_char_p(self._text.ctypes.data)))
            if self._length.value <= size:
                break
            self._text = np.empty(2 * self._length.value, dtype=np.uint8)
        text = self._text[: self._length.value].tobytes()
        leaves = [int(v) for v in _LEAVES.findall(text)]
        return max(leaves) if leaves else 1

    def score(self) -> np.ndarray:
        """LightGBM's training score now (class-major, a fresh array)."""
        out = np.empty(self._score_size)
        self._check(self._lib.LGBM_BoosterGetPredict(
            self._booster._handle, ctypes.c_int(0), ctypes.byref(self._length),
            out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))))
        return out

    def recompute_score(self, dataset):
        """Have LightGBM recompute its training score tree by tree, as training accumulated it:
        the booster's training data are reset to a ``Dataset`` of the same rows (LightGBM's subset
        of all of them, the same bins), for which it adds up every tree's outputs again.  Returns
        that ``Dataset`` (the booster's training data from now on)."""
        same = dataset.subset(np.arange(dataset.num_data(), dtype=np.int32)).construct()
        self._check(self._lib.LGBM_BoosterResetTrainingData(self._booster._handle, same._handle))
        return same

    def settle(self, rounds_before: int, before: np.ndarray | None, regrow: Callable[[], None],
               resync: Callable[[], None]) -> None:
        """After a round: while its trees may have been cut (as many leaves as the cap), undo it,
        raise the cap and grow it again (``regrow``: the same round's training call).
        ``rounds_before``: :meth:`iteration` before the round (a round that found no split adds
        no tree: nothing to check); ``before``: the training score before the round
        (class-major; None: all zeros, f_0); should the rollback not give it back to the bit,
        ``resync`` recomputes the score (:meth:`recompute_score`, with the caller's dataset)."""
        while self.active:
            rounds = self.iteration()
            if rounds <= rounds_before:
                return
            leaves = self.last_leaves(rounds - 1)
            self.largest = max(self.largest, leaves)
            if leaves < self.cap:
                return
            self._check(self._lib.LGBM_BoosterRollbackOneIter(self._booster._handle))
            now = self.score()
            expected = np.zeros(self._score_size) if before is None else np.asarray(before, dtype=np.float64).reshape(-1)
            exact = np.array_equal(now.view(np.int64), expected.view(np.int64))  # (signed zeros too)
            if not exact:
                resync()
            old, self.cap = self.cap, min(self.full, self.cap * GROWTH)
            self._check(self._lib.LGBM_BoosterResetParameter(
                self._booster._handle, ctypes.c_char_p(f"num_leaves={self.cap}".encode())))
            regrow()
            self.events.append((rounds_before, old, self.cap, not exact))


def with_num_leaves(text: str, num_leaves: int) -> str:
    """A LightGBM model text whose ``parameters:`` section says ``[num_leaves: num_leaves]`` (the
    parameter the model was asked for, where it was grown under a cap)."""
    at = text.rfind("\nparameters:\n")
    if at < 0:
        return text
    key = "\n[num_leaves: "
    start = text.find(key, at)
    if start < 0:
        return text
    end = text.find("]", start)
    if end < 0:  # pragma: no cover - LightGBM closes every parameter line
        return text
    return f"{text[:start]}{key}{int(num_leaves)}{text[end:]}"
