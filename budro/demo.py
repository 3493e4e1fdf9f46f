"""The embedded default: the paper's synthetic example (Appendix B.1, Figure 2), no download.

Plain XGBoost and BuDRO are trained on the same 150 points.  x1 (the neighbourhood) is protected
and the fair distance is ``|x2 - x2'|``: two people with the same x2 should get the same decision.
Consistency is the share of points whose prediction is unchanged when x1 is moved to the centre
of the other cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["DemoResult", "run_demo", "consistency", "DEMO_BACKEND_PARAMS"]

#: Tree parameters shared by plain boosting and BuDRO in the demo.
DEMO_BACKEND_PARAMS = {"max_depth": 3, "learning_rate": 0.01, "nthread": 1}


@dataclass
class DemoResult:
    rows: list[dict[str, Any]]
    figure: Path | None
    plain: Any
    fair: Any

    def table(self) -> str:
        lines = ["| model | accuracy | consistency |", "|---|---|---|"]
        for r in self.rows:
            lines.append(f"| {r['model']} | {r['accuracy']:.3f} | {r['consistency']:.3f} |")
        return "\n".join(lines)


def consistency(predict, X: np.ndarray, shift: float = 2.0) -> float:
    """Share of points whose predicted label is unchanged when x1 moves to the other cluster's centre."""
    X = np.asarray(X, dtype=float)
    Xc = X.copy()
    Xc[:, 0] = np.where(X[:, 0] < 0, shift, -shift)
    return float(np.mean(predict(X) == predict(Xc)))


def run_demo(output: str | Path | None = "budro-demo.png", *, eps: float = 0.01, n_steps: int = 300,
             random_state: int = 0, callbacks=None) -> DemoResult:
    """Train plain XGBoost and BuDRO on the synthetic example; optionally draw Figure 2."""
    import warnings

    from budro.budget import LargeBudgetWarning
    from budro.datasets import make_synthetic
    from budro.estimator import BuDROClassifier

    X, y, _ = make_synthetic(random_state=random_state)
    with warnings.catch_warnings():
        # The demo's budget is large on purpose: it lets the adversary relabel along x1 (98% of the
        # points at eps = 0.01), which is how BuDRO erases what x1 explains.
        warnings.simplefilter("ignore", LargeBudgetWarning)
        fair = BuDROClassifier(
            backend="xgboost", backend_params=dict(DEMO_BACKEND_PARAMS),
            solver="dual", fair_metric="sensitive-subspace", fair_metric_params={"fit_linear_models": False},
            protected=[0], eps=eps, n_steps=n_steps, random_state=random_state, callbacks=callbacks,
        ).fit(X, y)
    # Plain boosting: the library's own training, same parameters and number of trees.
    plain_backend = fair.backend_.fit_native(X, y, 2, fair.backend_.n_rounds, random_state=random_state)

    def plain_predict(Z):
        return np.argmax(plain_backend.predict_proba(np.asarray(Z, dtype=float)), axis=1)

    rows = [
        {"model": "plain XGBoost", "accuracy": float(np.mean(plain_predict(X) == y)),
         "consistency": consistency(plain_predict, X)},
        {"model": f"BuDRO (eps={eps:g})", "accuracy": float(np.mean(fair.predict(X) == y)),
         "consistency": consistency(fair.predict, X)},
    ]
    figure = None
    if output is not None:
        figure = _plot(Path(output), X, y, plain_backend, fair, rows)
    return DemoResult(rows=rows, figure=figure, plain=plain_backend, fair=fair)


def _plot(path: Path, X, y, plain_backend, fair, rows) -> Path:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the demo's figure needs matplotlib: pip install 'budro[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pad = 0.7
    xs = np.linspace(X[:, 0].min() - pad, X[:, 0].max() + pad, 300)
    ys = np.linspace(X[:, 1].min() - pad, X[:, 1].max() + pad, 200)
    gx, gy = np.meshgrid(xs, ys)
    grid = np.column_stack([gx.ravel(), gy.ravel()])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6), sharey=True)
    panels = [
        (axes[0], plain_backend.predict_proba(grid)[:, 1], rows[0]),
        (axes[1], fair.predict_proba(grid)[:, 1], rows[1]),
    ]
    for ax, proba, row in panels:
        ax.contourf(gx, gy, proba.reshape(gx.shape), levels=np.linspace(0, 1, 21), cmap="RdBu", alpha=0.75)
        ax.contour(gx, gy, proba.reshape(gx.shape), levels=[0.5], colors="k", linewidths=1.2)
        ax.scatter(X[:, 0], X[:, 1], c=np.where(y == 1, "tab:blue", "tab:red"), edgecolors="k", s=22, linewidths=0.5)
        ax.set_title(f"{row['model']}: accuracy {row['accuracy']:.2f}, consistency {row['consistency']:.2f}")
        ax.set_xlabel("x1 (protected)")
    axes[0].set_ylabel("x2 (fair)")
    plan = getattr(fair.last_transport_, "plan", None)
    if plan is not None:
        coo = plan.tocoo()
        moved = coo.row != coo.col
        for i, j in zip(coo.row[moved], coo.col[moved]):
            axes[1].annotate("", xy=X[i], xytext=X[j],
                             arrowprops={"arrowstyle": "->", "color": "0.15", "lw": 0.8, "alpha": 0.8})
    fig.suptitle("BuDRO on the paper's synthetic example (arrows: last round's transport plan)")
    fig.tight_layout()
    from budro._archive import save_figure

    try:
        return save_figure(fig, path, dpi=110)  # atomic, like every file budro writes
    finally:
        plt.close(fig)
