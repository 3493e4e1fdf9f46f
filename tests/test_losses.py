"""Per-label losses: the binary form against numpy's logaddexp, overflow-free at any margin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from budro.losses import label_losses, probabilities


@given(arrays(np.float64, st.integers(1, 50), elements=st.floats(-1e308, 1e308, allow_nan=False)))
def test_binary_losses_equal_logaddexp(m):
    got = label_losses(m, 2)
    ref = np.column_stack([np.logaddexp(0.0, m), np.logaddexp(0.0, -m)])
    assert got.shape == (m.size, 2) and np.all(np.isfinite(got)) and np.all(got >= 0)
    np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)


def test_binary_losses_are_the_cross_entropy_of_the_probabilities():
    m = np.linspace(-10, 10, 121)  # where 1 - sigmoid(m) is still accurate in float64
    p = probabilities(m, 2)
    np.testing.assert_allclose(label_losses(m, 2), -np.log(p), rtol=1e-9)
    np.testing.assert_allclose(np.exp(-label_losses(m, 2)).sum(axis=1), 1.0, rtol=1e-14)


@given(arrays(np.float64, st.integers(1, 300), elements=st.floats(-1e6, 1e6, allow_nan=False)))
def test_binary_losses_equal_the_plain_formula_bit_for_bit(m):
    # label_losses works in two buffers for speed; it must give exactly the values of the plain
    # expression (max(+-m, 0) + log1p(exp(-|m|))), which the docs and the solvers assume.
    t = np.log1p(np.exp(-np.abs(m)))
    ref = np.column_stack([np.maximum(m, 0.0) + t, np.maximum(-m, 0.0) + t])
    got = label_losses(m, 2)
    assert np.array_equal(got, ref)
    assert not np.shares_memory(got, m)


@given(arrays(np.float64, st.integers(1, 400), elements=st.floats(-1e6, 1e6, allow_nan=False)),
       st.integers(2, 3))
def test_binary_losses_in_parts_on_threads_equal_one_pass_bit_for_bit(m, threads):
    # large n: row parts on several threads; each element's value must not depend on its part
    import budro.losses as losses_module

    ref = np.empty((m.size, 2))
    losses_module._binary_losses(m, ref)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(losses_module, "PARALLEL_MIN_N", 8)
        mp.setenv("BUDRO_NUM_THREADS", str(threads))
        parts = losses_module._parts(m.size)
        got = label_losses(m, 2)
    finally:
        mp.undo()
    assert parts == (1 if m.size < 8 else max(1, min(threads, m.size // 4)))
    assert np.array_equal(got.view(np.int64), ref.view(np.int64))


def test_binary_losses_in_parts_raise_a_part_s_error():
    # an error in a part computed on another thread reaches the caller (no half-filled result)
    import threading

    import budro.losses as losses_module

    original = losses_module._binary_losses

    def failing_off_main_thread(m, out):
        if threading.current_thread() is not threading.main_thread():
            raise MemoryError("part failed")
        original(m, out)

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(losses_module, "PARALLEL_MIN_N", 8)
        mp.setattr(losses_module, "_binary_losses", failing_off_main_thread)
        mp.setenv("BUDRO_NUM_THREADS", "2")
        with pytest.raises(MemoryError, match="part failed"):
            label_losses(np.linspace(-3.0, 3.0, 64), 2)
    finally:
        mp.undo()
