"""Start-up: importing the package or the CLI, `--help`, `--version` and every command's `--help` import click
and none of the heavy libraries (issue #19); the lazy command table is complete.

Each case runs a fresh interpreter (``python -c``) and reads back which top-level packages it imported."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

import billing_audit.cli
from billing_audit.cli import LAZY_COMMANDS, main
from support import FIXTURES, ROOT

HEAVY = frozenset({"polars", "duckdb", "pydantic", "pydantic_core", "rich", "sqlglot", "yaml", "pyarrow", "numpy",
                   "pandas", "pyspark", "boto3", "botocore", "google", "azure", "annotated_types"})

# The helps that are written from what a heavy module holds, and what they may import for it.
ALLOWED: dict[tuple[str, ...], frozenset[str]] = {
    ("ingest",): frozenset({"duckdb"}),  # the event sources it recognises (billing_audit.events)
    ("prices", "ingest"): frozenset({"duckdb"}),  # the price-file formats (billing_audit.pricing)
    # --fail-on's choices are the app layer's (billing_audit.app.FAIL_ON)
    ("report",): frozenset({"duckdb", "polars", "pydantic", "pydantic_core"}),
    ("audit",): frozenset({"duckdb", "polars", "pydantic", "pydantic_core"}),
}
PULLERS = frozenset({"duckdb", "polars", "pydantic", "pydantic_core", "annotated_types"})  # flags from Options models

PROBE = """
import json, sys
{code}
print("\\n" + json.dumps(sorted({{m.split(".")[0] for m in sys.modules}})))
"""


def _imported(code: str) -> set[str]:
    """The heavy top-level packages a fresh interpreter has imported after running ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BILLING_AUDIT_")}
    p = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return set(json.loads(p.stdout.strip().splitlines()[-1])) & HEAVY


def _cli(*args: str) -> str:
    """``code`` that runs the command line with ``args`` (its output is discarded; an exit is expected)."""
    return ("import contextlib, io\nfrom billing_audit.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    try:\n        main({list(args)!r}, prog_name='billing-audit')\n    except SystemExit:\n        pass")


def _paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out += _paths(cmd, (*prefix, name))
    return out


def test_importing_the_package_imports_nothing_heavy() -> None:
    assert _imported("import billing_audit") == set()
    assert _imported("import billing_audit.cli") == set()


def test_the_package_names_still_load() -> None:
    """``from billing_audit import X`` (README "Python API") loads what it names, and only then."""
    assert _imported("from billing_audit import Store, IngestReport, Audit, open") >= {"duckdb"}
    import billing_audit
    from billing_audit.api import Audit
    from billing_audit.store import IngestReport, Store

    assert (billing_audit.Store, billing_audit.IngestReport, billing_audit.Audit) == (Store, IngestReport, Audit)
    assert {"Audit", "IngestReport", "Store", "open"} <= set(dir(billing_audit))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        billing_audit.Nope  # noqa: B018


@pytest.mark.parametrize("args", [("--help",), ("-h",), ("--version",), ("reprot",), ()])
def test_top_level_imports_click_only(args: tuple[str, ...]) -> None:
    assert _imported(_cli(*args)) == set()


@pytest.mark.parametrize("path", _paths(main), ids="-".join)
def test_each_command_help_imports_only_what_it_shows(path: tuple[str, ...]) -> None:
    allowed = PULLERS if path[0] == "pull" or path[:2] == ("prices", "pull") else ALLOWED.get(path, frozenset())
    assert _imported(_cli(*path, "--help")) <= allowed


def test_every_lazy_command_resolves_to_its_command() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(LAZY_COMMANDS)
    for name, where in LAZY_COMMANDS.items():
        module, _, attr = where.partition(":")
        command = main.get_command(ctx, name)
        assert command is getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command) and command.name == name


def test_every_command_module_command_is_in_the_lazy_table() -> None:
    """A command added to a module's COMMANDS but not to LAZY_COMMANDS would never be reachable."""
    listed = {LAZY_COMMANDS[name]: name for name in LAZY_COMMANDS}
    modules = [m.name for m in pkgutil.iter_modules(billing_audit.cli.__path__) if m.name.endswith("_cmd")]
    assert len(modules) >= 12
    for module_name in modules:
        module = importlib.import_module(f"billing_audit.cli.{module_name}")
        for command in module.COMMANDS:
            attr = next(a for a, v in vars(module).items() if v is command)
            assert f"billing_audit.cli.{module_name}:{attr}" in listed, f"{module_name}.{attr} is not in LAZY_COMMANDS"


def test_did_you_mean_picks_among_every_command() -> None:
    """In a fresh interpreter (no command loaded yet), a mistyped command is matched against every command."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code = f"from billing_audit.cli import main; main({list(args)!r}, prog_name='billing-audit')"
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)

    r = run("reprot")
    assert r.returncode == 2
    assert "No such command 'reprot'. (Did you mean one of: 'export', 'report'?)" in r.stderr
    r = run("rules", "lsit")
    assert r.returncode == 2 and "Did you mean 'list'?" in r.stderr


def test_facts_written_out_for_start_up_equal_their_owners() -> None:
    """What the CLI writes out to avoid importing its owner: the store's default file, the engines' names, the
    clouds' titles (the pullers')."""
    from billing_audit import engines, pulling, registry, store
    from billing_audit.cli import options

    assert options.DEFAULT_DB == store.DEFAULT_DB
    assert options.engine_names() == ["duckdb", *(n for n in engines.names() if n != "duckdb")]
    for name in registry.with_part("pull"):
        assert pulling.puller(name).title == registry.connector(name).TITLE


def test_a_known_choice_is_taken_without_loading_the_choices() -> None:
    """--engine duckdb (the default) does not read every installed package's entry points; any other value does,
    and a wrong one is refused with the choices loaded."""
    from billing_audit.cli.options import LazyChoice

    loads: list[int] = []

    def load() -> list[str]:
        loads.append(1)
        return ["duckdb", "spark"]

    choice = LazyChoice(load, known=["duckdb"])
    assert (choice.convert("duckdb", None, None), loads) == ("duckdb", [])
    assert (choice.convert("spark", None, None), loads) == ("spark", [1])
    with pytest.raises(click.BadParameter, match="'nope' is not one of 'duckdb', 'spark'"):
        choice.convert("nope", None, None)


def test_search_loads_neither_the_config_nor_the_rule_parser(tmp_path: Path) -> None:
    """`search` (platform teams run it in loops) imports what it reads with, not pydantic (the config: search
    reads none) nor sqlglot, rich or the clouds' SDKs: about 0.1 s of a 0.5 s search (issue #19); as JSON it
    reads its rows from Arrow and imports no polars either (0.2 s more).  The search itself runs and finds the
    fixtures' restart fees."""
    import billing_audit

    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "aws"]).errors
        store.tag()
    code = ("import contextlib, io\nfrom billing_audit.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n    try:\n"
            f"        main(['search', 'spot restart', '--db', {str(db)!r}, '--format', 'json'], prog_name='billing-audit')\n"
            "    except SystemExit as e:\n        assert not e.code, e.code\n"
            "doc = json.loads(out.getvalue())\nassert doc['totals'], doc")
    assert _imported(code) == {"duckdb", "pyarrow"}


def test_ingest_loads_neither_polars_nor_the_rule_parser(tmp_path: Path) -> None:
    """`ingest` writes the store with DuckDB and prints text: it imports neither polars (0.1 s) nor sqlglot, and
    the ingest is done (its lines are in the store)."""
    import duckdb

    db = tmp_path / "i.duckdb"
    imported = _imported(_cli("ingest", str(FIXTURES / "aws"), "--db", str(db)))
    assert not imported & {"polars", "sqlglot", "numpy", "pandas"}, imported
    assert "duckdb" in imported
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT count(*) FROM line_items").fetchone()
    assert row is not None and row[0] > 0


def test_report_without_a_config_file_imports_no_pydantic(tmp_path: Path) -> None:
    """The config's defaults are plain dataclasses: a report with no billing-audit.toml (run from a folder that has
    none) imports no pydantic (about 0.08 s of a 1 s `report --period`, issue #19), and the JSON report no polars,
    pyarrow or rich; with a config file it validates the file (pydantic then) and the file's values count."""
    import billing_audit

    db = tmp_path / "r.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "aws"]).errors
        store.tag()
    out = tmp_path / "r.json"
    code = (f"import os\nos.chdir({str(tmp_path)!r})\n"
            + _cli("report", "--db", str(db), "--format", "json", "--out", str(out))
            + f"\ndoc = json.loads(open({str(out)!r}).read())\nassert doc['jobs'], doc")
    imported = _imported(code)
    assert not imported & {"pydantic", "pydantic_core", "annotated_types"}, imported
    # the JSON is made from the report's rows: no polars, pyarrow or rich either (0.13 s, issue #19)
    assert not imported & {"polars", "pyarrow", "rich"}, imported
    assert "duckdb" in imported
    csv = _imported(f"import os\nos.chdir({str(tmp_path)!r})\n"
                    + _cli("report", "--db", str(db), "--format", "csv", "--out", str(tmp_path / "r.csv")))
    assert "polars" in csv  # the other formats are made from the frames
    (tmp_path / "c.toml").write_text("[estimates]\nenabled = false\n")
    with_file = _imported(code.replace("'--out'", f"'--config', {str(tmp_path / 'c.toml')!r}, '--out'"))
    assert "pydantic" in with_file
    doc = json.loads(out.read_text())
    assert doc["jobs"] and all(j["recompute_cost_estimate"] is None for j in doc["jobs"])
