from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# CI runs the property tests derandomized (the same examples every run, no example database), so a CI failure
# reproduces; elsewhere they stay random.  A failing case hypothesis finds is kept as an @example on its test
# (tests/core/test_incremental.py), so it runs every time whatever the profile.  Recent Hypothesis versions have a
# "ci" profile much like it built in; registering it here makes it hold whatever version is installed.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite fixtures/golden/*.jsonl from current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A fresh on-disk store path."""
    return tmp_path / "store.duckdb"


@pytest.fixture(autouse=True)
def _no_env_db(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BILLING_AUDIT_DB", raising=False)
    os.environ.setdefault("NO_COLOR", "1")
