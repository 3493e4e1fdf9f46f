"""The embedded default (the paper's synthetic example) and the command line."""

import textwrap

import numpy as np

from budro.cli import main
from budro.demo import run_demo


def test_demo_budro_is_clearly_more_consistent(tmp_path):
    result = run_demo(tmp_path / "demo.png")
    plain, fair = result.rows
    assert fair["consistency"] >= plain["consistency"] + 0.15, result.table()
    assert fair["consistency"] >= 0.9, result.table()
    assert fair["accuracy"] >= 0.7, result.table()
    png = (tmp_path / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    plan = result.fair.last_transport_.plan
    assert plan.shape == (150, 150) and np.isclose(plan.sum(), 1.0)


def test_cli_demo_prints_the_table(tmp_path, capsys):
    assert main(["demo", "--no-plot", "--quiet", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "| plain XGBoost |" in out and "| BuDRO (eps=0.01) |" in out


def test_cli_fit_writes_a_model(tmp_path, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        eps = 0.05
        n_steps = 4
        protected = ["x1"]
        [data]
        source = "synthetic"
        [backend]
        name = "xgboost"
        nthread = 1
    """))
    out_model = tmp_path / "m.budro"
    # with the progress bar on (drawn during fit; the saved model holds no callback)
    assert main(["fit", str(cfg), "--output", str(out_model), "--native", str(tmp_path / "m.json")]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "4/4" in captured.err and "robust=" in captured.err
    assert "model saved to" in text and out_model.is_file() and (tmp_path / "m.json").is_file()
    from budro.persist import load_model

    assert len(load_model(out_model).history_) == 4


def test_cli_reports_config_errors_cleanly(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('solver = "simplex"\n')
    assert main(["fit", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("budro: error: config key 'solver.name': unknown solver 'simplex'")
    assert "Traceback" not in err
