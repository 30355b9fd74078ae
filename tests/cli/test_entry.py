"""The console script's end (billing_audit.cli.run): the process leaves without the interpreter's teardown, so
every byte a command wrote must be out and its exit code click's, through a pipe as on a terminal.

Each case runs the installed ``billing-audit`` script (pyproject's [project.scripts]) or ``python -m
billing_audit.cli`` in a fresh process and reads its output and exit code."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support import FIXTURES

SCRIPT = Path(sys.executable).with_name("billing-audit")


def _cli(*args: str, module: bool = False) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "billing_audit.cli", *args] if module else [str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("entry") / "s.duckdb"
    r = _cli("audit", str(FIXTURES / "aws"), "--db", str(db), "--out", str(db.parent / "out"), "--quiet")
    assert r.returncode == 0, r.stderr
    return db


def test_the_script_is_the_entry_that_ends_early() -> None:
    assert SCRIPT.exists() and shutil.which(str(SCRIPT))
    assert "from billing_audit.cli import run" in SCRIPT.read_text()


@pytest.mark.parametrize("module", [False, True], ids=["script", "python -m"])
def test_a_long_json_document_arrives_whole_through_a_pipe(store: Path, module: bool) -> None:
    """The report's JSON (about 30 kB: several blocks of the pipe's buffered stdout) and a search's parse, with
    every job and line: nothing was left in a buffer."""
    rep = _cli("report", "--db", str(store), "--format", "json", module=module)
    assert rep.returncode == 0, rep.stderr
    assert len(rep.stdout) > 3 * 8192
    doc = json.loads(rep.stdout)
    assert doc["kind"] == "report" and len(doc["jobs"]) >= 3
    r = _cli("search", "egress", "--db", str(store), "--format", "json", "--lines", module=module)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout)
    assert found["kind"] == "search" and found["lines"] and found["matched"]["lines"] == len(found["lines"])


@pytest.mark.parametrize("module", [False, True], ids=["script", "python -m"])
def test_exit_codes_and_messages_are_clicks(tmp_path: Path, module: bool) -> None:
    ok = _cli("--version", module=module)
    assert (ok.returncode, ok.stdout.strip()) == (0, f"billing-audit, version {_version()}")
    missing = _cli("report", "--db", str(tmp_path / "none.duckdb"), module=module)
    assert missing.returncode == 2
    assert f"no store at {tmp_path / 'none.duckdb'}" in missing.stderr
    assert not (tmp_path / "none.duckdb").exists()
    unknown = _cli("nosuch", module=module)
    assert unknown.returncode == 2 and "No such command 'nosuch'" in unknown.stderr


def test_a_written_file_is_complete(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "teams.csv"
    r = _cli("export", "--db", str(store), "--by", "team", "--format", "csv", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = out.read_text().splitlines()
    assert rows[0].startswith("period,team,") and len(rows) > 1


def _version() -> str:
    import billing_audit

    return billing_audit.__version__
