"""LightGBM's trees under a leaf cap: the same models, and what the cap saves, side by side.

    BUDRO_DATA_HOME=../shared/data python benchmarks/lightgbm_leaves.py                 # Adult, 2 repeats
    BUDRO_DATA_HOME=../shared/data python benchmarks/lightgbm_leaves.py --repeats 3

At Adult's paper settings (``benchmarks/training.py``'s: 200 trees of depth 14, LightGBM's
``num_leaves = 2**14``, m = 32) one process fits, ``--repeats`` times in alternation:

* plain LightGBM (``lightgbm.train``, budro's ``fit_native``) with ``num_leaves = 16384``, and
  the same with ``num_leaves = 2048``: the library's own training pays for the slots too;
  whether the two models' trees are the same is checked on their text;
* BuDRO with the capped trees (budro's default, ``budro.backends._lightgbm_leaves``) and with the
  cap off (every tree under ``num_leaves = 16384``): fit time, mean tree phase per round, whether
  the rounds (eta*, robust loss) and the finished model texts are the same to the bit, and the
  cap's record (largest tree, rounds grown again).

Not a test: times follow the machine's load.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time

import numpy as np
from _report import count_argument  # benchmarks/ is the script's folder, first on sys.path


def _trees(text: str) -> str:
    return text[text.index("Tree="):text.index("end of trees")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=count_argument("repeats"), default=2, help="alternations of each fit (default 2)")
    args = ap.parse_args(argv)

    import training  # benchmarks/training.py, the paper settings (the script's folder is first on sys.path)

    import budro.backends._lightgbm_leaves as leaves
    from budro import BuDROClassifier
    from budro.backends.lightgbm import LightGBMBackend
    from budro.datasets._home import MissingDataError

    try:
        X, y, cfg, params, _ = training._paper_setting("adult", "lightgbm")
    except MissingDataError as exc:
        print(f"lightgbm_leaves.py: {exc}", file=sys.stderr)
        return 2
    params = training._with_thread_param("lightgbm", params, None)
    Xa, rounds = np.asarray(X, dtype=np.float64), 200
    first_cap = leaves.FIRST_CAP
    rows: dict[str, list] = {}
    texts: dict[str, str] = {}
    histories: dict[str, str] = {}
    caps = {}

    def plain(num_leaves: int) -> None:
        t0 = time.perf_counter()
        backend = LightGBMBackend(**{**params, "num_leaves": num_leaves}).fit_native(Xa, y, 2, rounds, random_state=0)
        rows.setdefault(f"plain, num_leaves = {num_leaves}", []).append((time.perf_counter() - t0, None))
        texts[f"plain {num_leaves}"] = _trees(backend.to_native_bytes().decode())

    def budro_fit(capped: bool) -> None:
        leaves.FIRST_CAP = first_cap if capped else 10**9
        seen = []
        clf = BuDROClassifier(backend="lightgbm", backend_params=params, eps=cfg.eps, n_steps=rounds - 1,
                              random_state=0, n_neighbors=32, solver=cfg.solver,
                              solver_params=dict(cfg.solver_params), fair_metric=cfg.fair_metric,
                              fair_metric_params=dict(cfg.fair_metric_params), protected=list(cfg.protected) or None,
                              callbacks=[lambda info: seen.append(info.trainer.backend._cap) if not seen else None])
        t0 = time.perf_counter()
        clf.fit(X, y)
        seconds = time.perf_counter() - t0
        key = "BuDRO, capped trees (default)" if capped else "BuDRO, cap off"
        tree_ms = 1000 * float(np.mean([r.time_tree for r in clf.history_]))
        rows.setdefault(key, []).append((seconds - clf.time_setup_, tree_ms))
        h = np.array([(r.eta, r.robust_loss) for r in clf.history_])
        histories[key] = hashlib.sha1(h.tobytes()).hexdigest()[:16]
        texts[key] = clf.backend_.to_native_bytes().decode()
        if capped and seen and seen[0] is not None:
            caps["cap"] = (seen[0].cap, seen[0].largest, len(seen[0].events))
        leaves.FIRST_CAP = first_cap

    for _ in range(args.repeats):
        plain(16384)
        plain(2048)
        budro_fit(True)
        budro_fit(False)

    same_plain = texts["plain 16384"] == texts["plain 2048"]
    same_budro = texts["BuDRO, capped trees (default)"] == texts["BuDRO, cap off"]
    same_rounds = histories["BuDRO, capped trees (default)"] == histories["BuDRO, cap off"]
    print(f"Adult, LightGBM, {rounds} trees, the paper's parameters ({params}); {args.repeats} alternations "
          "in one process; fit seconds (BuDRO's without its set-up) per repeat, median ms per round")
    print()
    print("| fit | seconds per repeat | ms per round (median) | tree phase ms per round |")
    print("|---|---|---:|---:|")
    for key, values in rows.items():
        secs = [v[0] for v in values]
        tree = "" if values[0][1] is None else f"{np.median([v[1] for v in values]):.2f}"
        print(f"| {key} | {', '.join(f'{s:.2f}' for s in secs)} | {1000 * np.median(secs) / rounds:.2f} | {tree} |")
    print()
    print(f"- plain trees under num_leaves = 2048 the same as under 16384: {'yes' if same_plain else 'NO'}")
    print(f"- BuDRO capped and uncapped: the same rounds (eta*, robust loss; sha1 {histories['BuDRO, cap off']}): "
          f"{'yes' if same_rounds else 'NO'}; the same finished model text: {'yes' if same_budro else 'NO'}")
    if caps:
        cap, largest, events = caps["cap"]
        print(f"- the cap: {cap} at the end, largest tree {largest} leaves, {events} round(s) grown again")
    return 0 if same_budro and same_rounds else 1


if __name__ == "__main__":
    raise SystemExit(main())
