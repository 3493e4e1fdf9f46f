"""Progress bar (tqdm), the estimator's verbose parameter, and ``budro --version``."""

import copy
import io
import pickle
from importlib.metadata import version

import numpy as np
import pytest
from sklearn.base import clone

from budro import BuDROClassifier
from budro.cli import main
from budro.exceptions import ValidationError
from budro.progress import ProgressBar

FAST = {"max_depth": 2, "nthread": 1}


def _stop_after_two_rounds(info):
    return info.record.step == 1


def _data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    return X, y


def test_bar_shows_round_losses_and_time_left_and_closes_after_the_last_round():
    X, y = _data()
    stream = io.StringIO()
    bar = ProgressBar(stream)
    clf = BuDROClassifier(n_steps=6, eps=0.05, backend_params=FAST, callbacks=[bar], random_state=0).fit(X, y)
    text = stream.getvalue()
    last = clf.history_[-1]
    assert "6/6" in text
    assert f"robust={last.robust_loss:.4f}" in text and f"plain={last.plain_loss:.4f}" in text
    assert "<" in text  # tqdm's "elapsed<remaining"
    assert text.endswith("\n") and bar._bar is None  # closed after the last round
    # the same callback in a second fit opens a new bar
    clf.set_params(n_steps=3).fit(X, y)
    assert "3/3" in stream.getvalue()[len(text):]


def test_estimator_with_a_bar_pickles_and_clones_without_the_open_bar():
    X, y = _data()
    stream = io.StringIO()
    bar = ProgressBar(stream, desc="fit")
    clf = BuDROClassifier(n_steps=10, backend_params=FAST, callbacks=[bar, _stop_after_two_rounds]).fit(X, y)
    assert bar._bar is not None  # stopped early by another callback: still open
    again = pickle.loads(pickle.dumps(clf))
    assert again.callbacks[0]._bar is None and again.callbacks[0].stream is None
    np.testing.assert_array_equal(again.predict(X), clf.predict(X))
    cloned = clone(clf)
    assert cloned.callbacks[0] is not bar and cloned.callbacks[0]._bar is None
    assert copy.deepcopy(bar).desc == "fit"
    bar.close()
    bar.close()  # twice is fine
    assert bar._bar is None


def test_verbose_draws_a_bar_on_stderr_during_fit_only(capsys):
    X, y = _data()
    clf = BuDROClassifier(n_steps=4, backend_params=FAST, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "4/4" in err and "robust=" in err
    assert clf.get_params()["verbose"] == 1 and clf.callbacks is None  # nothing kept on the model
    BuDROClassifier(n_steps=4, backend_params=FAST).fit(X, y)
    assert capsys.readouterr().err == ""


def test_verbose_bar_is_closed_when_a_callback_stops_early(capsys):
    X, y = _data()
    BuDROClassifier(n_steps=20, backend_params=FAST, verbose=2,
                    callbacks=[lambda info: info.record.step == 2]).fit(X, y)
    err = capsys.readouterr().err
    assert "3/20" in err and err.endswith("\n")


@pytest.mark.parametrize("bad", [-1, 0.5, "yes", None])
def test_verbose_is_validated_in_fit(bad):
    X, y = _data()
    clf = BuDROClassifier(n_steps=2, verbose=bad)
    with pytest.raises(ValidationError, match="verbose must be an integer >= 0"):
        clf.fit(X, y)


def test_cli_version_prints_the_installed_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"budro {version('budro')}"
