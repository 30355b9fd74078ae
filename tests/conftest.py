from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


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
