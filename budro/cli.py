"""The ``budro`` command line.

    budro demo [--output FIG.png]         the paper's synthetic example (no download)
    budro plugins list [--json]           every backend, solver and fair metric, with its package
    budro fit CONFIG.toml [--output M]    train from a config and save the model
    budro experiment CONFIG [--splits N] [--grid [SPEC ...]]   repeated splits, tables, trade-off plot
    budro audit MODEL --data NAME|FILE    evaluate any saved classifier on a data set or any table file
    budro compare CONFIG [--backends A,B] the config's BuDRO on each backend
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import warnings
from pathlib import Path
from typing import Sequence

from budro.exceptions import BudroError

__all__ = ["main"]


def _cmd_demo(args: argparse.Namespace) -> int:
    from budro.demo import run_demo
    from budro.progress import ProgressBar

    output = None if args.no_plot else args.output
    callbacks = [] if args.quiet else [ProgressBar()]
    result = run_demo(output, eps=args.eps, n_steps=args.steps, random_state=args.seed, callbacks=callbacks)
    print(result.table())
    if result.figure is not None:
        print(f"figure written to {result.figure}")
    return 0


def _cmd_plugins_list(args: argparse.Namespace) -> int:
    from budro import registry

    entries = registry.plugins(args.kind)
    left_out = registry.broken(args.kind)  # every plugin left out, with its error (strict mode included)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries] + [b.to_dict() for b in left_out], indent=2))
        return 0
    rows = [("KIND", "NAME", "ALIASES", "PACKAGE", "DESCRIPTION")]
    rows += [(e.kind, e.name, ",".join(e.spec.aliases) or "-", e.source, e.description) for e in entries]
    rows += [(b.kind or "?", b.name or "-", "-", b.source, f"BROKEN ({b.stage}): {b.error}") for b in left_out]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return 0


def _cmd_fit(args: argparse.Namespace) -> int:
    import numpy as np

    from budro.config import load_config
    from budro.persist import save_model

    cfg = load_config(args.config)
    output = args.output or cfg.output or str(Path(args.config).with_suffix(".budro").name)
    if Path(output).is_dir():  # refused before training, not after it
        from budro.exceptions import ValidationError

        raise ValidationError(f"the model output {output!r} is a directory; give a file name, e.g. {str(Path(output) / 'model.budro')!r}")
    X, y = cfg.load_data()
    # verbose draws the bar during fit only: the saved model holds no callback
    est = cfg.estimator().set_params(verbose=0 if args.quiet else 1)
    where = ""
    if cfg.cluster is not None:  # [cluster]: fitted on Dask, saved as the single-machine model
        from budro.dask._cluster import client_from_config, fit_on_cluster

        client, close = client_from_config(cfg.cluster)
        try:
            n_workers = len(client.nthreads())
            est = fit_on_cluster(est, X, y, client, cfg.cluster).to_local()
        finally:
            close()
        where = f" on a Dask cluster of {n_workers} worker(s)"
    else:
        est.fit(X, y)
    path = save_model(est, output)
    acc = float(np.mean(est.predict(X) == np.asarray(y)))
    last = est.history_[-1] if est.history_ else None
    print(f"trained {cfg.backend} + {cfg.solver} + {cfg.fair_metric}, eps={cfg.eps:g}, {len(est.history_)} BuDRO rounds{where}")
    print(f"training accuracy {acc:.4f}" + (f", last robust loss {last.robust_loss:.4f}, plain loss {last.plain_loss:.4f}" if last else ""))
    print(f"model saved to {path}")
    if args.native:
        est.save_native_model(args.native)
        print(f"native {cfg.backend} model saved to {args.native}")
    return 0


def _command_line() -> str:
    import shlex

    return "budro " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _cmd_experiment(args: argparse.Namespace) -> int:
    from budro.config import load_config
    from budro.experiment import parse_grid_arguments, run_experiment

    cfg = load_config(args.config)
    if args.seed is not None:
        cfg.experiment["seed"] = args.seed
    grid: object = False
    if args.grid is not None:
        grid = parse_grid_arguments(cfg, args.grid) if args.grid else True
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    output = args.output
    if output is None and not (cfg.experiment or {}).get("output"):
        output = str(Path("results") / Path(args.config).stem)
    result = run_experiment(cfg, splits=args.splits, output=output, methods=methods, grid=grid, fresh=args.fresh,
                            progress=not args.quiet, command=_command_line(),
                            log=lambda note: print(f"budro: {note}", file=sys.stderr, flush=True))
    print(result.table())
    print(f"\n{result.n_computed} fit(s) computed, {result.n_reused} reused from {result.output / 'runs'}")
    for name, path in result.files.items():
        print(f"{name}: {path}")
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from budro.audit import audit, load_any_model

    model = load_any_model(args.model, trust_pickle=args.trust_pickle)

    def listed(text):
        return None if text is None else [v.strip() for v in text.split(",") if v.strip()]

    read_options = {"header": False if args.no_header else None, "names": listed(args.names),
                    "separator": args.separator, "na_values": listed(args.na_values), "skip_rows": args.skip_rows,
                    "label_strip": args.label_strip, "drop": listed(args.drop)}
    read_options = {k: v for k, v in read_options.items() if v is not None}
    builtin = {"standardize": False} if args.raw else {}
    if args.data_home:
        builtin["data_home"] = args.data_home
    report = audit(model, args.data, config=args.config, label=args.label, read_options=read_options or None,
                   protected=listed(args.protected), split_seed=args.split_seed, test_size=args.test_size,
                   certificate=not args.no_certificate, eps=args.eps, solver=args.solver, n_neighbors=args.n_neighbors,
                   max_samples=args.max_samples or None, n_bootstrap=args.bootstrap, **builtin)
    print(report.table())
    if args.output:
        from budro.experiment import write_text

        write_text(args.output, json.dumps(report.to_dict(), indent=2) + "\n")  # atomic: never half a report
        print(f"\nreport written to {args.output}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from budro.compare import run_compare
    from budro.config import load_config

    cfg = load_config(args.config)
    if cfg.cluster is not None:  # not silently trained on this machine instead
        from budro.exceptions import ConfigError

        raise ConfigError("budro compare trains on this machine (every backend; a Dask cluster trains XGBoost only): "
                          "remove the [cluster] section, or use budro fit / budro experiment with it")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()] if args.backends else None
    output = args.output or str(Path("results") / f"{Path(args.config).stem}-compare")
    result = run_compare(cfg, backends, splits=args.splits, output=output, progress=not args.quiet,
                         command=_command_line())
    print(result.table())
    for name, params in result.params.items():
        print(f"  {name}: {params}")
    for note in result.notes:
        print(f"  note: {note}")
    for name, path in result.files.items():
        print(f"{name}: {path}")
    return 0


def _installed_version() -> str:
    """The installed distribution's version (its metadata), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("budro")
    except PackageNotFoundError:  # running from a source tree that is not installed
        from budro import __version__

        return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="budro", description="Individually fair gradient boosting (BuDRO).")
    parser.add_argument("--strict-plugins", action="store_true",
                        help="a broken third-party plugin is an error, not a warning (also BUDRO_STRICT_PLUGINS=1)")
    parser.add_argument("--version", action="version", version=f"budro {_installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="train plain XGBoost and BuDRO on the paper's synthetic example")
    demo.add_argument("--output", "-o", default="budro-demo.png", help="PNG of both decision surfaces (default: %(default)s)")
    demo.add_argument("--no-plot", action="store_true", help="skip the figure")
    demo.add_argument("--eps", type=float, default=0.01, help="transport budget (default: %(default)s)")
    demo.add_argument("--steps", type=int, default=300, help="BuDRO rounds (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0, help="data and booster seed (default: %(default)s)")
    demo.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    demo.set_defaults(func=_cmd_demo)

    plugins = sub.add_parser("plugins", help="inspect plugins")
    psub = plugins.add_subparsers(dest="plugins_command", required=True)
    plist = psub.add_parser("list", help="list every plugin with its kind, package and description")
    plist.add_argument("--json", action="store_true", help="machine-readable output")
    plist.add_argument("--kind", choices=["backend", "solver", "fair_metric"], help="only this kind")
    plist.set_defaults(func=_cmd_plugins_list)

    fit = sub.add_parser("fit", help="train from a TOML config and save the model")
    fit.add_argument("config", help="TOML file (see budro.config)")
    fit.add_argument("--output", "-o", help="model file (default: the config's 'output' or CONFIG.budro)")
    fit.add_argument("--native", help="also write the booster in its library's own format to this path")
    fit.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    fit.set_defaults(func=_cmd_fit)

    exp = sub.add_parser("experiment", help="every configured method on repeated random 80/20 splits: tables and plots")
    exp.add_argument("config", help="TOML file with [data], [methods.<label>] ... (see budro.experiment)")
    exp.add_argument("--splits", type=int, help="number of random splits (default: the config's, else 10)")
    exp.add_argument("--output", "-o", help="output folder (default: the config's experiment.output, else results/CONFIG)")
    exp.add_argument("--seed", type=int, help="seed of the first split (default: the config's experiment.seed, else 0)")
    exp.add_argument("--methods", help="comma-separated method labels to run (default: all)")
    exp.add_argument("--grid", nargs="*", action="extend", metavar="SPEC",  # repeated --grid: all of them
                     help="trade-off grid: alone, the config's [grid] section; or LABEL.PARAM=V1,V2 / PARAM=V1,V2 "
                          "(PARAM alone applies to every budro method), e.g. --grid eps=0.1,0.3,1")
    exp.add_argument("--fresh", action="store_true", help="recompute every fit even where a result file exists")
    exp.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    exp.set_defaults(func=_cmd_experiment)

    aud = sub.add_parser("audit", help="evaluate a saved classifier (budro, pickled scikit-learn/XGBoost, XGBoost JSON)")
    aud.add_argument("model", help="model file: budro (.budro), XGBoost .json/.ubj, skops (.skops), or pickle/joblib "
                                   "(with --trust-pickle)")
    aud.add_argument("--data", help="data set (german, adult, compas, synthetic) or a table file: CSV/text, or parquet "
                                    "(.parquet); optional with --config")
    aud.add_argument("--config", help="TOML config whose [data] section (file and read options), protected, "
                                      "[counterfactuals] and [groups] the audit reuses; --data then replaces the file")
    aud.add_argument("--label", help="label column of a table file (default: the config's data.label)")
    aud.add_argument("--protected", help="comma-separated protected columns of a table file (default: the config's, "
                                         "else the model's)")
    aud.add_argument("--no-header", action="store_true", help="the file has no header row (name columns with --names)")
    aud.add_argument("--names", help="comma-separated column names of a headerless file")
    aud.add_argument("--separator", help="field separator, e.g. ';', ' ', ', ' (default ',')")
    aud.add_argument("--na-values", help="comma-separated strings that mean missing, e.g. '?,NA'")
    aud.add_argument("--skip-rows", type=int, help="lines to skip at the top of the file")
    aud.add_argument("--label-strip", help="characters stripped from both ends of every label (e.g. '.')")
    aud.add_argument("--drop", help="comma-separated columns of the file the model does not take")
    aud.add_argument("--data-home", help="folder holding the data files (default: $BUDRO_DATA_HOME)")
    aud.add_argument("--split-seed", type=int, help="evaluate on the test part of the 80/20 split with this seed "
                                                    "(as budro experiment draws it); default: every row")
    aud.add_argument("--test-size", type=float, default=0.2, help="test share of the split (default: %(default)s)")
    aud.add_argument("--raw", action="store_true", help="built-in data sets: do not standardise the continuous columns")
    aud.add_argument("--eps", type=float, help="certificate budget (default: the model's own eps, else the paper's for the data)")
    aud.add_argument("--solver", default="dual", help="transport solver of the certificate (default: %(default)s)")
    aud.add_argument("--n-neighbors", type=int, help="sparse certificate: moves only to the m nearest neighbours")
    aud.add_argument("--max-samples", type=int, default=5000,
                     help="certificate on at most this many random rows; 0 for all (default: %(default)s)")
    aud.add_argument("--bootstrap", type=int, default=0, help="bootstrap resamples for the certificate's interval")
    aud.add_argument("--no-certificate", action="store_true", help="skip the certificate")
    aud.add_argument("--output", "-o", help="also write the report as JSON")
    aud.add_argument("--trust-pickle", action="store_true",
                     help="also read pickle/joblib model files; unpickling runs code stored in the file, so only for "
                          "files whose author you trust")
    aud.set_defaults(func=_cmd_audit)

    cmp_ = sub.add_parser("compare", help="the config's BuDRO on each backend: accuracy, fairness, training time")
    cmp_.add_argument("config", help="TOML file (data, fair metric, solver, eps from its top level)")
    cmp_.add_argument("--backends", help="comma-separated backend names (default: every registered backend)")
    cmp_.add_argument("--splits", type=int, default=1, help="random 80/20 splits to average over (default: %(default)s)")
    cmp_.add_argument("--output", "-o", help="output folder for compare.md / compare.csv (default: results/CONFIG-compare)")
    cmp_.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    cmp_.set_defaults(func=_cmd_compare)
    return parser


@contextlib.contextmanager
def _plugin_mode(strict: bool):
    """Broken plugins as one ``budro: warning:`` line each; with ``--strict-plugins``, a registry
    that raises PluginError instead (the default registry is restored afterwards)."""
    from budro import registry
    from budro.exceptions import PluginWarning

    with warnings.catch_warnings():
        show = warnings.showwarning

        def _show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, PluginWarning):
                print(f"budro: warning: {message}", file=sys.stderr)
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = _show
        if strict:
            with registry.use_registry(registry.Registry(strict=True)):
                yield
        else:
            yield


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _plugin_mode(args.strict_plugins):
            return int(args.func(args) or 0)
    except BudroError as exc:
        print(f"budro: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, the shell's status for SIGINT (128 + 2)
        newline = "\n" if getattr(sys.stderr, "isatty", lambda: False)() else ""  # past the terminal's ^C
        print(f"{newline}budro: {str(exc) or 'interrupted'}", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
