"""Compiled kernel (numba) of the budget check's scan (:func:`budro.budget._scan_embedded`).

The caller computes, per tile of training rows of one label, the dot products ``G`` of the
sampled rows with the tile's rows (a BLAS GEMM).  This kernel makes in one pass what the numpy
path makes in a series of whole-tile passes, with the same floating-point operations in the same
order (no fast-math, no contraction): the squared distance ``(|z_r|^2 + |z_j|^2) - 2 G[r, j]``
clipped at 0, a sampled row's own point left out, the distances at most ``tol`` counted as zero
pairs and left out of the minima, and each sampled row's smallest remaining distance kept as its
nearest and, where the tile's label is not the row's, its nearest of another label.  So both paths
give the same diagnosis to the bit.  Imported only where numba is installed (``pip install
budro[fast]``); ``nogil``: spans of tiles run in Python threads."""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def reduce_tile(G, ns, norms_t, own_col, ys, label, tol, nearest, opposite, zero_other):  # pragma: no cover - compiled
    """One tile (training rows of label ``label``): update ``nearest``, ``opposite`` and
    ``zero_other`` of the sampled rows in place and return the tile's number of zero pairs.
    ``own_col[r]`` is the column of sampled row r's own point in the tile, or -1."""
    m, b = G.shape
    zeros = 0
    for r in range(m):
        nr = ns[r]
        own = own_col[r]
        low = np.inf
        count = 0
        for j in range(b):
            if j == own:
                continue
            d = (nr + norms_t[j]) - 2.0 * G[r, j]
            if d < 0.0:
                d = 0.0
            if d <= tol:
                count += 1
            elif d < low:
                low = d
        zeros += count
        other = ys[r] != label
        if count > 0 and other:
            zero_other[r] = True
        if low < nearest[r]:
            nearest[r] = low
        if other and low < opposite[r]:
            opposite[r] = low
    return zeros

