"""The entropic solver on NumPy (host) against torch on CUDA and cupy (GPU), side by side in one run.

    python benchmarks/entropic_devices.py                       # dense n = 4000, embedding n = 20000
    python benchmarks/entropic_devices.py --dense 2000 --embedding 0 --repeat 2
    python benchmarks/entropic_devices.py --json out.json

Synthetic instances (seeded): losses of two labels in [0, 1), a 10-dimensional fair embedding
with duplicated rows (every point has a twin), eps a tenth of the mean squared distance.  For each
instance and each namespace that is installed and reaches a device, the script solves the problem
``--repeat`` times with ``EntropicSolver`` (same gamma, tolerance and block size on every
namespace) and reports the median wall time of a solve, the number of passes over the columns,
and the largest difference of the weights, objective and eta from NumPy's solve (the GPU sums in
another order: agreement is to rounding).  A dense instance's cost matrix is moved to the device
once; an embedding instance's cost blocks are computed on the host and copied to the device block
by block (``EmbeddingCost.column_block``), so its GPU time includes those copies.

Not a test: times depend on the machine.  The report names the machine and the devices.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from budro.solvers.entropic import EntropicSolver  # noqa: E402
from budro.transport import DenseCost, EmbeddingCost, TransportProblem  # noqa: E402


def _instance(n: int, dense: bool, seed: int = 0) -> TransportProblem:
    rng = np.random.default_rng(seed)
    half = (n + 1) // 2
    Z = rng.normal(size=(half, 10))
    Z = np.concatenate([Z, Z])[:n]  # every point has a twin at cost 0: ties in every column
    losses = rng.random((n, 2))
    labels = rng.integers(0, 2, n)
    cost = EmbeddingCost(Z, cache_bytes=0)
    sample = cost.column_block(0, min(n, 500))
    eps = 0.1 * float(sample.mean())
    if dense:
        cost = DenseCost(cost.column_block(0, n))
    return TransportProblem(losses, labels, cost, eps)


def _namespaces() -> list[tuple[str, str, object]]:
    """(label, namespace, device) for numpy and every GPU namespace that reaches a device."""
    out: list[tuple[str, str, object]] = [("numpy (host)", "numpy", None)]
    try:
        import torch

        if torch.cuda.is_available():
            out.append((f"torch {torch.__version__} cuda ({torch.cuda.get_device_name(0)})", "torch", "cuda"))
        else:
            print("torch: no CUDA device", file=sys.stderr)
    except ImportError:
        print("torch: not installed", file=sys.stderr)
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append((f"cupy {cupy.__version__}", "cupy", None))
    except Exception as exc:  # not installed, or no driver
        print(f"cupy: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
    return out


def _sync(namespace: str) -> None:
    if namespace == "torch":
        import torch

        torch.cuda.synchronize()
    elif namespace == "cupy":
        import cupy

        cupy.cuda.Device().synchronize()


def run(sizes: list[tuple[str, int]], repeat: int, block_mib: int) -> list[dict]:
    rows = []
    spaces = _namespaces()
    for kind, n in sizes:
        problem = _instance(n, dense=(kind == "dense"))
        ref = None
        for label, namespace, device in spaces:
            solver = EntropicSolver(array_namespace=namespace, device=device, block_bytes=block_mib << 20)
            times = []
            for _ in range(repeat):
                _sync(namespace)
                t0 = time.perf_counter()
                res = solver.solve(problem)
                _sync(namespace)
                times.append(time.perf_counter() - t0)
            row = dict(instance=kind, n=n, namespace=label, median_s=statistics.median(times),
                       times_s=times, passes=res.info.get("n_passes"), converged=bool(res.converged),
                       objective=float(res.objective), eta=float(res.eta))
            if ref is None:
                ref = res
            else:
                row["max_weight_diff"] = float(np.max(np.abs(res.weights - ref.weights)))
                row["objective_rel_diff"] = abs(res.objective - ref.objective) / max(abs(ref.objective), 1e-300)
                row["eta_rel_diff"] = abs(res.eta - ref.eta) / max(abs(ref.eta), 1e-300)
            rows.append(row)
            extra = "" if "max_weight_diff" not in row else (
                f"  max|dw| {row['max_weight_diff']:.1e}  obj rel {row['objective_rel_diff']:.1e}  "
                f"eta rel {row['eta_rel_diff']:.1e}")
            print(f"{kind:9s} n={n:6d}  {label:45s} {row['median_s'] * 1e3:9.1f} ms  passes {row['passes']}{extra}",
                  flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dense", type=int, default=4000, help="n of the dense instance (0: none)")
    ap.add_argument("--embedding", type=int, default=20000, help="n of the embedding instance (0: none)")
    ap.add_argument("--repeat", type=int, default=3, help="solves per namespace and instance (median reported)")
    ap.add_argument("--block-mib", type=int, default=256, help="EntropicSolver's block_bytes, in MiB")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    for name in ("dense", "embedding", "repeat", "block_mib"):
        if getattr(args, name) < (1 if name in ("repeat", "block_mib") else 0):
            ap.error(f"--{name.replace('_', '-')} must be a positive count, got {getattr(args, name)}")
    sizes = [(k, n) for k, n in (("dense", args.dense), ("embedding", args.embedding)) if n > 0]
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"python {platform.python_version()}, numpy {np.__version__}", flush=True)
    rows = run(sizes, args.repeat, args.block_mib)
    if args.json:
        tmp = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp.write_text(json.dumps(rows, indent=2))
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
