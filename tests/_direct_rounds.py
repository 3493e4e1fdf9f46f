"""What the backends' direct per-round calls are tested by (tests/test_backend_xgboost.py and
tests/test_backend_lightgbm.py): a few driven rounds recorded, and two records compared to the bit."""

from __future__ import annotations

import numpy as np


def record_rounds(backend, X, y, K, weights, rounds=4, **start):
    """Start ``backend`` on (X, y) and step it ``rounds`` times with ``weights(seed)``: the
    backend and its margins and losses before every step and after the last."""
    backend.start(X, y, K, **start)
    seen = []
    for seed in range(rounds):
        seen.append((backend.margins(), backend.losses()))
        backend.step(weights(seed))
    seen.append((backend.margins(), backend.losses()))
    return backend, seen


def assert_same_rounds(seen, other, n, K):
    """Two records of the same rounds: every margin and loss equal to the bit, the margins in the
    backend's shape, and the rounds learned something."""
    for (m1, l1), (m2, l2) in zip(seen, other, strict=True):
        assert m1.shape == ((n,) if K == 2 else (n, K))
        np.testing.assert_array_equal(m1, m2)
        np.testing.assert_array_equal(l1, l2)
    assert np.ptp(seen[-1][0] - seen[1][0]) > 1e-3
