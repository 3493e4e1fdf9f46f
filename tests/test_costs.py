"""Cost objects: dense, embedding (blocked) and sparse nearest-neighbour."""

import numpy as np
import pytest

from budro.exceptions import ValidationError
from budro.transport import DenseCost, EmbeddingCost, NeighborCost


def _points(rng, n=60):
    Z = rng.normal(size=(n, 3))
    Z[10:20] = Z[0]  # exact duplicates
    return Z


def test_embedding_cost_blocks_match_the_full_matrix(rng):
    Z = _points(rng)
    full = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    cached = EmbeddingCost(Z)
    blocked = EmbeddingCost(Z, cache_bytes=0)
    assert cached.is_dense and not blocked.is_dense
    for start, stop, block in blocked.iter_blocks(block_bytes=8 * 60 * 7):
        assert block.shape == (60, stop - start) and stop - start <= 7
        assert np.allclose(block, full[:, start:stop], atol=1e-12)
    # duplicates cost exactly zero, never rounding noise
    assert np.all(cached.column_block(0, 60)[np.ix_(range(10, 20), [0])] == 0.0)
    assert np.all(blocked.column_block(0, 20)[10:20, 0] == 0.0)
    rows, cols = np.array([3, 12, 0]), np.array([5, 0, 0])
    assert np.allclose(blocked.entries(rows, cols), full[rows, cols])


def test_embedding_costs_among_rows_are_the_formula_bit_for_bit(rng):
    """``costs_among`` of a blocked cost (no held matrix): ``|z_i|^2 + |z_j|^2 - 2 z_i.z_j`` with
    the zero-snapping, operation by operation (it computes them in place), duplicates exactly 0,
    the diagonal 0; a held matrix gives its own entries."""
    Z = _points(rng)
    rows = np.array([0, 12, 3, 15, 40, 41, 59])
    blocked = EmbeddingCost(Z, cache_bytes=0)
    got = blocked.costs_among(rows)
    sq = np.einsum("ij,ij->i", Z, Z)[rows]
    scale = sq[:, None] + sq[None, :]
    want = scale - 2.0 * (Z[rows] @ Z[rows].T)
    want[want <= 1e-12 * scale] = 0.0
    np.fill_diagonal(want, 0.0)
    np.testing.assert_array_equal(got, want)
    assert got[0, 1] == 0.0 and got[1, 3] == 0.0  # rows 0, 12 and 15 are copies
    cached = EmbeddingCost(Z)
    cached.column_block(0, 60)  # builds the held matrix
    np.testing.assert_array_equal(cached.costs_among(rows), cached.column_block(0, 60)[np.ix_(rows, rows)])


def test_neighbor_cost_lists(rng):
    Z = _points(rng)
    full = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    cost = NeighborCost(Z, 6)
    assert cost.neighbors.shape == (60, 6) and cost.is_sparse
    assert np.array_equal(cost.neighbors[:, 0], np.arange(60))
    assert np.all(cost.neighbor_costs[:, 0] == 0)
    assert np.allclose(cost.neighbor_costs, full[cost.neighbors, np.arange(60)[:, None]], atol=1e-12)
    # exact k-nearest: nothing outside a list is closer than the list's radius
    for j in range(60):
        outside = np.setdiff1d(np.arange(60), cost.neighbors[j])
        assert full[outside, j].min() >= cost.radius[j] - 1e-12
    block = cost.column_block(0, 60)
    assert np.isfinite(block).sum() == 60 * 6
    assert np.isinf(cost.entries(np.array([cost.neighbors[5, -1] + 0]), np.array([5]))).sum() == 0


def test_neighbor_cost_with_more_duplicates_than_m(rng):
    Z = _points(rng)
    cost = NeighborCost(Z, 4)  # rows 0, 10..19 are 11 copies: lists fill with zero-cost copies
    assert np.array_equal(cost.neighbors[:, 0], np.arange(60))
    for j in [0, 10, 15]:
        assert np.all(cost.neighbor_costs[j] == 0.0)
        assert len(set(cost.neighbors[j])) == 4


@pytest.mark.parametrize("make, match", [
    (lambda: DenseCost([[0, 1], [1, 0], [0, 0]]), "square"),
    (lambda: DenseCost([[0, -1], [1, 0]]), "non-negative"),
    (lambda: DenseCost([[1, 1], [1, 0]]), "zero diagonal"),
    (lambda: DenseCost([[0, np.nan], [1, 0]]), "NaN"),
    (lambda: EmbeddingCost(np.zeros(3)), "2-D"),
    (lambda: NeighborCost(np.zeros((5, 2)), 0), "m must be an integer >= 1"),
    (lambda: NeighborCost(np.zeros((5, 2)), 2, method="annoy"), "method must be one of: auto, exact, sklearn, faiss"),
])
def test_bad_costs(make, match):
    with pytest.raises(ValidationError, match=match):
        make()
