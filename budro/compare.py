"""The same BuDRO training on every booster backend: ``budro compare CONFIG --backends ...``.

Data, fair metric, solver, eps and number of rounds come from the config's top level; only the
backend changes.  The parameters of each backend are, in this order of preference:

1. the config's ``[compare.<backend>]`` table (e.g. ``[compare.lightgbm] num_leaves = 15``);
2. for the config's own backend, its ``[backend]`` parameters;
3. otherwise the ``[backend]`` parameters that the other backend accepts under the same name
   (``weight_scale``, ``max_depth``, ``learning_rate``, ``reg_lambda``, ``scale_pos_weight``,
   ... where it knows them); the others are dropped, and the report says which.

Each backend is trained and evaluated on the same split(s); the report has one row per backend:
accuracy, balanced accuracy, every consistency score and group gap the data set defines, and the
training time (mean ± standard deviation with several splits).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, TextIO

from budro import registry
from budro.config import Config
from budro.exceptions import BudroError, ConfigError
from budro.experiment import markdown_table, metric_columns, summarize, write_csv, write_text

__all__ = ["CompareResult", "backend_params_for", "run_compare"]


@dataclass
class CompareResult:
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    columns: list[str]
    params: dict[str, dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)

    def table(self) -> str:
        return markdown_table(self.summary, self.columns, first="Backend")


def backend_params_for(cfg: Config, backend: str) -> tuple[dict[str, Any], list[str]]:
    """The parameters ``backend`` trains with in a comparison, and the config keys it dropped."""
    configured = (cfg.compare or {}).get("params", {})
    if backend in configured:
        return dict(configured[backend]), []
    if backend == cfg.backend:
        return dict(cfg.backend_params), []
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in cfg.backend_params.items():
        try:
            registry.create("backend", backend, **{**kept, key: value})
        except (BudroError, TypeError, ValueError):
            dropped.append(key)
        else:
            kept[key] = value
    return kept, dropped


def run_compare(
    cfg: Config,
    backends: Sequence[str] | None = None,
    *,
    splits: int = 1,
    output: str | os.PathLike | None = None,
    progress: bool | TextIO = True,
    command: str | None = None,
) -> CompareResult:
    """Train the config's BuDRO on each backend and evaluate on the same test split(s)."""
    import sys

    from budro.evaluation import evaluate

    available = registry.available("backend")
    if backends is None:
        backends = (cfg.compare or {}).get("backends") or available
    names = []
    for b in backends:
        try:
            names.append(registry.get("backend", b).name)
        except BudroError as exc:
            raise ConfigError(f"--backends: {exc}") from None
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ConfigError(f"splits must be an integer >= 1, got {splits!r}")
    exp = cfg.experiment or {}
    dataset = cfg.load_dataset()
    stream = None if progress is False else (sys.stderr if progress is True else progress)
    params: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for name in names:
        params[name], dropped = backend_params_for(cfg, name)
        if dropped:
            notes.append(f"{name}: dropped backend parameter(s) it does not accept: {', '.join(dropped)} "
                         f"(set them in [compare.{name}])")
    rows: list[dict[str, Any]] = []
    seed0 = int(exp.get("seed", 0))
    bar = None
    if stream is not None:
        from tqdm.auto import tqdm

        bar = tqdm(total=splits * len(names), desc="compare", unit="fit", file=stream, dynamic_ncols=True)
    for k in range(splits):
        train, test = dataset.train_test_split(float(exp.get("test_size", 0.2)), random_state=seed0 + k,
                                               stratify=bool(exp.get("stratify", True)))
        for name in names:
            est = cfg.estimator().set_params(backend=name, backend_params=dict(params[name]))
            t0 = time.perf_counter()
            est.fit(train.X, train.y)
            seconds = time.perf_counter() - t0
            row = evaluate(est, test)
            row = {k2: (v.item() if hasattr(v, "item") else v) for k2, v in row.items()}
            row["fit_seconds"] = seconds
            rows.append({"method": name, "point": "", "split": k, "seed": seed0 + k, **row})
            if bar is not None:
                bar.set_postfix_str(f"split {k} {name}: accuracy {row['accuracy']:.3f}, fit {seconds:.1f} s")
                bar.update(1)
    if bar is not None:
        bar.close()
    columns = metric_columns(rows)
    summary = summarize(rows)
    result = CompareResult(rows=rows, summary=summary, columns=columns, params=params, notes=notes)
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        result.files["compare.csv"] = write_csv(out / "compare.csv", [_flat(e) for e in summary])
        result.files["compare-splits.csv"] = write_csv(out / "compare-splits.csv", rows)
        text = [f"# Backends compared on {dataset.name or 'data'}", "",
                f"BuDRO with solver {cfg.solver!r}, fair metric {cfg.fair_metric!r}, eps {cfg.eps:g}, "
                f"{cfg.n_steps} rounds; {splits} split(s) 80/20, seed {seed0}"
                + ("" if splits == 1 else f"..{seed0 + splits - 1} (mean ± std)") + "."]
        if command:
            text += ["", f"Command: `{command}`"]
        text += ["", result.table(), ""]
        text += [f"- {name}: {params[name]}" for name in names]
        text += [f"- note: {n}" for n in notes]
        write_text(out / "compare.md", "\n".join(text) + "\n")
        result.files["compare.md"] = out / "compare.md"
    return result


def _flat(entry: dict[str, Any]) -> dict[str, Any]:
    out = {"backend": entry["method"], "n_splits": entry["n_splits"]}
    out.update({k: v for k, v in entry.items() if k not in ("method", "point", "n_splits")})
    return out
