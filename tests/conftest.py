import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def data_home_path() -> Path:
    """Where tests read the paper's raw files: ``$BUDRO_DATA_HOME`` when set, else ../shared/data."""
    env = os.environ.get("BUDRO_DATA_HOME")
    return Path(env) if env else SHARED_DATA


@pytest.fixture
def data_home(monkeypatch):
    """Point BUDRO_DATA_HOME at the test data home; skip with a reason when it is absent."""
    home = data_home_path()
    if not home.is_dir():
        pytest.skip(f"the paper's raw data is not at {home}: set BUDRO_DATA_HOME to the folder holding "
                    "german/, adult/ and compas/ (README.md, 'Reproduce the paper')")
    monkeypatch.setenv("BUDRO_DATA_HOME", str(home))
    return home


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
