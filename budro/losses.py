"""Per-label losses of a model from its raw margins: ``L[i, k] = loss(f(x_i), k)``."""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["label_losses", "probabilities"]


def label_losses(margins: np.ndarray, n_classes: int) -> np.ndarray:
    """Cross-entropy of the model at each point under every label, shape (n, n_classes).

    Binary models give one margin per point (the log-odds of label 1); multi-class models give
    one margin per class (softmax logits).  Computed stably (no overflow for large margins).
    """
    m = np.asarray(margins, dtype=np.float64)
    if n_classes == 2 and m.ndim == 1:
        # -log sigmoid(m) for label 1, -log(1 - sigmoid(m)) = log(1 + e^m) for label 0.
        # Both share t = log(1 + e^-|m|): log(1 + e^m) = max(m, 0) + t, log(1 + e^-m) = max(-m, 0) + t
        # (one exp and one log1p instead of two logaddexp; equal to within 1 ulp, no overflow).
        # Every pass writes into one of two buffers: a fresh n-sized temporary per operation costs
        # page faults at the size of Adult (0.66 ms per call with temporaries, 0.14 ms without, for
        # n = 36177; the same values bit for bit).
        out = np.empty((m.shape[0], 2))
        t = np.abs(m)
        np.negative(t, out=t)
        np.exp(t, out=t)
        np.log1p(t, out=t)
        label0, label1 = out[:, 0], out[:, 1]
        np.maximum(m, 0.0, out=label0)
        label0 += t
        np.negative(m, out=label1)
        np.maximum(label1, 0.0, out=label1)
        label1 += t
        return out
    m = m.reshape(m.shape[0], -1)
    return logsumexp(m, axis=1, keepdims=True) - m


def probabilities(margins: np.ndarray, n_classes: int) -> np.ndarray:
    """Class probabilities (n, n_classes) from raw margins."""
    m = np.asarray(margins, dtype=np.float64)
    if n_classes == 2 and m.ndim == 1:
        p1 = 0.5 * (1.0 + np.tanh(0.5 * m))  # the logistic function without overflow
        return np.column_stack([1.0 - p1, p1])
    m = m.reshape(m.shape[0], -1)
    return np.exp(m - logsumexp(m, axis=1, keepdims=True))
