"""Time of the budget check before training (``budro.budget.diagnose_budget``) at large n.

    python benchmarks/budget_check.py --n 1000000 --d 20 --repeat 2

The check compares ``--samples`` rows (500, the default of a fit) with every training row in the
fair metric's embedding; here the embedding is a synthetic one of the training benchmark's shape
(``benchmarks/training.py``'s scaling data: 5 latent factors, a binary label).  Prints the wall
time of each repeat and the diagnosis (so that two versions of budro can be compared on the same
rows).  Not a test: the time depends on the machine and its load.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


class _Identity:
    """A fitted metric whose embedding is the rows themselves (Euclidean fair distance)."""

    def embed(self, X):
        return np.asarray(X, dtype=float)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000, help="training rows")
    ap.add_argument("--d", type=int, default=20, help="embedding dimension")
    ap.add_argument("--samples", type=int, default=500, help="sampled rows (max_samples)")
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    for name, low in (("n", 2), ("d", 1), ("samples", 1), ("repeat", 1)):
        if getattr(args, name) < low:
            ap.error(f"--{name} must be an integer >= {low}, got {getattr(args, name)}")
    from budro.budget import diagnose_budget

    rng = np.random.default_rng(0)
    F = rng.normal(size=(args.n, 5))
    X = F @ (rng.normal(size=(5, args.d)) / np.sqrt(5)) + 0.02 * rng.normal(size=(args.n, args.d))
    y = (rng.random(args.n) < 1.0 / (1.0 + np.exp(-X[:, 1]))).astype(int)
    for r in range(args.repeat):
        t0 = time.perf_counter()
        d = diagnose_budget(_Identity(), X, y, max_samples=args.samples, random_state=0)
        print(f"n = {args.n}, d = {args.d}, {d.n_sampled} samples: {time.perf_counter() - t0:.2f} s "
              f"(nn_scale {d.nn_scale:.6g}, median opposite {d.median_opposite:.6g}, zero pairs {d.zero_pair_share:.3g})",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
