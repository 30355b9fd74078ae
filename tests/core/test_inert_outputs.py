"""Issue #15, items 4 and 6: bill and rule text is inert in every output.

A bill whose tags, resource names, descriptions and currency carry rich markup (``[/x]``, ``[link=...]``),
terminal escape sequences (SGR, OSC-8 hyperlinks, OSC titles, erase, 8-bit CSI), BEL, DEL, NUL and spreadsheet
formulas, and rule files whose title and description do the same, go through every command and format: each
exits 0 without a traceback, no output holds a raw ESC, BEL, DEL, NUL or C1 character (with FORCE_COLOR=1 only
rich's own colour codes, never an OSC-8 link), the payload is shown literally where it is shown, and every CSV
cell that could be a formula is neutralised.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit import inert
from billing_audit.cli import main
from hostile_bill import (
    ESC_PAYLOAD,
    FORMULA,
    FORMULA_TEAM,
    LINK_JOB,
    MARKUP_JOB,
    PERIOD,
    RESOURCE,
    write_bill,
    write_rule,
)
from support import ROOT

RAW = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # what no output may hold (CR only as CSV's CRLF)
# rich's own codes with FORCE_COLOR=1: styling (SGR), and the progress bar's cursor hide/show, erase line, line up
RICH = re.compile(r"\x1b\[[0-9;]*m|\x1b\[\?25[lh]|\x1b\[2K|\x1b\[\d*A|\r(?!\n)")
SGR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Hostile:
    folder: Path
    bill: Path
    rules: Path
    db: Path
    restart_line: str  # the restart-fee line on the resource named [/oops]
    audit: list[str] = field(default_factory=list)  # the audit's output


def cli(*args: str) -> tuple[int, str]:
    """Run in-process: exit code and stdout + stderr, as written (CRLF stays CRLF)."""
    from billing_audit.cli import console

    width = console.out.width
    console.out.width = 2000  # the payloads are long: unwrapped cells, so the test can look for them whole
    try:
        r = CliRunner().invoke(main, list(args))
    finally:
        console.out.width = width
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, (r.stdout_bytes + r.stderr_bytes).decode("utf-8")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Hostile:
    folder = tmp_path_factory.mktemp("hostile")
    bill = write_bill(folder)
    rules = write_rule(folder / "rules")
    db = folder / "s.duckdb"
    code, out = cli("audit", str(bill), "--db", str(db), "--out", str(folder / "audit"), "--period", PERIOD)
    assert code == 0, out
    code, tagged = cli("tag", "--db", str(db), "--rules", str(rules))
    assert code == 0, tagged
    with billing_audit.open(db) as store:
        (line,) = store.con.execute("SELECT x_LineItemId FROM line_items WHERE ResourceId = ? AND "
                                    "ChargeDescription LIKE '%restart%'", [RESOURCE]).fetchone()
    return Hostile(folder, bill, rules, db, line, [out, tagged])




def assert_inert(text: str, colour: bool = False) -> None:
    """No raw control character; with colour, only rich's SGR codes (never an OSC-8 link or a title)."""
    assert "Traceback" not in text, text
    if colour:
        assert "\x1b]" not in text and "\x07" not in text, repr(text)
        text = RICH.sub("", text)
    assert not RAW.search(text), repr(RAW.findall(text))
    assert "\r" not in text.replace("\r\n", ""), repr(text)


# ------------------------------------------------------------------------------------------------ the mechanism


@pytest.mark.parametrize("payload", [ESC_PAYLOAD, "\x9d8;;https://evil.example\x9c", "a\x1b", "\x1b]8;;open ended",
                                     "tab\tand\nnewline stay", "\x85\x00\x7f", "naïve ünïcode ✓ 東京"])
def test_clean_strips_controls_in_python_and_polars_alike(payload: str) -> None:
    import polars as pl

    cleaned = inert.clean(payload)
    assert not RAW.search(cleaned)
    df = inert.clean_frame(pl.DataFrame({"s": [payload], "l": [[payload, "x"]]}))
    assert df["s"][0] == cleaned and df["l"][0].to_list() == [cleaned, "x"]
    assert inert.clean("naïve ünïcode ✓ 東京") == "naïve ünïcode ✓ 東京"
    assert inert.clean("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert inert.clean(ESC_PAYLOAD) == "redoscbell"


def test_json_keeps_the_value_but_no_raw_control_character() -> None:
    doc = inert.json_inert(json.dumps({"job": ESC_PAYLOAD + "\x85"}, ensure_ascii=False))
    assert not RAW.search(doc)
    assert json.loads(doc)["job"] == ESC_PAYLOAD + "\x85"


def test_terminal_text_is_never_markup() -> None:
    from rich.console import Console

    console = Console(record=True, force_terminal=True, color_system="truecolor", file=io.StringIO())
    for payload in (MARKUP_JOB, LINK_JOB, "[bold]x[/bold]", ":thumbs_up:"):
        console.print(inert.text(payload))
    out = console.export_text()
    assert MARKUP_JOB in out and LINK_JOB in out and "[bold]x[/bold]" in out and ":thumbs_up:" in out


# ------------------------------------------------------------------------------------------------ every command


def commands(h: Hostile) -> dict[str, list[str]]:
    db = ["--db", str(h.db)]
    rules = ["--rules", str(h.rules)]
    out = {
        **{f"report {f}": ["report", *db, "--format", f] for f in ("table", "json", "csv", "markdown", "html")},
        **{f"search {f}": ["search", "restart", *db, "--format", f] for f in ("table", "json", "csv")},
        **{f"search --lines {f}": ["search", "restart", "--lines", *db, "--format", f] for f in ("table", "json", "csv")},
        "search oops": ["search", "oops", *db, "--lines"],
        **{f"rules list {f}": ["rules", "list", *rules, "--format", f] for f in ("table", "csv", "json")},
        "rules show": ["rules", "show", "TM100", *rules],
        "rules test": ["rules", "test", *rules],
        "explain": ["explain", h.restart_line, *db],
        **{f"summary {f}": ["summary", *db, "--format", f] for f in ("table", "csv", "json")},
        **{f"summary --exports {f}": ["summary", "--exports", *db, "--format", f] for f in ("table", "csv", "json")},
        **{f"prices list {f}": ["prices", "list", *db, "--format", f] for f in ("table", "csv", "json")},
        "tag": ["tag", *db, *rules],
    }
    return out


SHOWN = {  # what each output must show literally (as its format writes it)
    "report table": [MARKUP_JOB, LINK_JOB, "escredoscbell"],
    "report json": [MARKUP_JOB, LINK_JOB],
    "report csv": [MARKUP_JOB, LINK_JOB, "escredoscbell"],
    "report markdown": [r"\[/x\]", r"\[link=https://evil.example\]click\[/link\]", "escredoscbell"],
    "report html": [MARKUP_JOB, LINK_JOB, "escredoscbell"],
    "search --lines table": [RESOURCE],
    "search --lines csv": [RESOURCE, LINK_JOB],
    "search --lines json": [RESOURCE],
    "search oops": [RESOURCE],
    "rules list table": [MARKUP_JOB],
    "rules list csv": [f"{MARKUP_JOB} {LINK_JOB} redosc"],
    "rules show": [f"{MARKUP_JOB} {LINK_JOB} redosc", "[bold]not bold[/bold]", RESOURCE],
    "explain": [RESOURCE, "matched TM100 [custom]: [/x] [/oops]", LINK_JOB],
}


@pytest.fixture(scope="module")
def outputs(hostile: Hostile) -> dict[str, tuple[int, str]]:
    return {name: cli(*args) for name, args in commands(hostile).items()}


@pytest.mark.parametrize("name", list(commands(Hostile(Path("x"), Path("x"), Path("x"), Path("x"), "id"))))
def test_every_command_and_format_is_inert(outputs: dict[str, tuple[int, str]], name: str) -> None:
    code, text = outputs[name]
    assert code == 0, text
    assert_inert(text)
    for shown in SHOWN.get(name, []):
        assert shown in text, (shown, text)


def test_audit_is_inert_and_its_files_too(hostile: Hostile) -> None:
    for text in hostile.audit:
        assert_inert(text)
    assert MARKUP_JOB in hostile.audit[0] and LINK_JOB in hostile.audit[0]
    folder = hostile.folder / "audit"
    for name in ("report.html", "report.json", "jobs.csv", "teams.csv"):
        text = (folder / name).read_bytes().decode("utf-8")
        assert_inert(text)
    jobs = json.loads((folder / "report.json").read_bytes().decode("utf-8"))["jobs"]
    names = {j["job"] for j in jobs}
    assert MARKUP_JOB in names and LINK_JOB in names  # JSON is data: the values as the bill has them
    assert any(inert.clean(n) == "escredoscbell" and n != "escredoscbell" for n in names)
    assert "escredoscbell" in (folder / "jobs.csv").read_bytes().decode("utf-8")


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
@pytest.mark.parametrize("by", ["team", "job"])
def test_export_is_inert(hostile: Hostile, tmp_path: Path, by: str, fmt: str) -> None:
    out = tmp_path / f"export.{fmt}"
    code, text = cli("export", "--db", str(hostile.db), "--by", by, "--format", fmt, "--out", str(out))
    assert code == 0, text
    assert_inert(text)
    if fmt != "parquet":
        assert_inert(out.read_bytes().decode("utf-8"))


def test_report_file_outputs_are_inert(hostile: Hostile, tmp_path: Path) -> None:
    for fmt in ("table", "json", "csv", "markdown", "html"):
        out = tmp_path / f"report.{fmt}"
        code, text = cli("report", "--db", str(hostile.db), "--format", fmt, "--out", str(out))
        assert code == 0, text
        assert_inert(out.read_bytes().decode("utf-8"))
        if fmt != "markdown":
            assert MARKUP_JOB in out.read_bytes().decode("utf-8")


FORCED = ["report table", "search table", "search --lines table", "search oops", "rules list table", "rules show",
          "explain", "summary table", "summary --exports table", "tag"]


def test_with_force_color_no_link_or_sequence_gets_through(hostile: Hostile, tmp_path: Path) -> None:
    """A terminal: rich colours its own tables, but bill text never becomes a link, a title or an erase."""
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "220"}
    env.pop("NO_COLOR", None)
    every = commands(hostile)
    runs = [[*every[name]] for name in FORCED]
    runs.append(["audit", str(hostile.bill), "--db", str(tmp_path / "a.duckdb"), "--out", str(tmp_path / "audit"),
                 "--period", PERIOD])
    coloured = 0
    for args in runs:
        p = subprocess.run([sys.executable, "-m", "billing_audit.cli", *args], capture_output=True, env=env,
                           cwd=tmp_path, timeout=120)
        text = p.stdout.decode() + p.stderr.decode()
        assert p.returncode == 0, (args, text)
        assert_inert(text, colour=True)
        coloured += bool(SGR.search(text))
        plain = RICH.sub("", text)
        if args[0] in ("report", "audit"):  # a terminal's table may shorten a long name with an ellipsis
            assert MARKUP_JOB in plain and LINK_JOB[:20] in plain, plain
        if args[0] == "search" and "--lines" in args:
            assert RESOURCE in plain
    assert coloured, "FORCE_COLOR=1 did not colour anything: the test would prove nothing"


# ------------------------------------------------------------------------------------------------ item 6: CSV

CSV_OUTPUTS = {  # every command and format that emits CSV: (command path, how the test runs it)
    "summary": ["summary --csv", "summary --exports csv"],
    "rules list": ["rules list csv"],
    "prices list": ["prices list csv"],
    "search": ["search csv", "search --lines csv"],
    "report": ["report csv"],
    "export": ["export --by team", "export --by job"],
    "audit": ["audit jobs.csv", "audit teams.csv"],
}


def _csv_commands(group: click.Group, prefix: str = "") -> set[str]:
    """Every command that can write CSV: a --format with a csv choice, or (audit) CSV files."""
    found = set()
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(cmd, click.Group):
            found |= _csv_commands(cmd, path + " ")
            continue
        for p in cmd.params:
            if p.name == "fmt" and isinstance(p.type, click.Choice) and "csv" in p.type.choices:
                found.add(path)
            if ".csv" in (getattr(p, "help", None) or ""):  # a file it writes: audit's --out
                found.add(path)
    return found


def test_the_csv_walk_covers_every_command_that_writes_csv() -> None:
    assert _csv_commands(main) == set(CSV_OUTPUTS)


def _cells(text: str) -> list[str]:
    assert "\r\n" in text and "\n" not in text.replace("\r\n", ""), "CSV rows end with CRLF (RFC 4180)"
    return [c for row in csv.reader(io.StringIO(text, newline="")) for c in row]


def _number(cell: str) -> bool:
    return re.fullmatch(r"-?\d+(\.\d+)?", cell) is not None


def _assert_neutral(text: str) -> list[str]:
    cells = _cells(text)
    bad = [c for c in cells if c.startswith(inert.FORMULA_START) and not _number(c)]
    assert not bad, bad
    return cells


def test_every_csv_neutralises_formulas(hostile: Hostile, outputs: dict[str, tuple[int, str]], tmp_path: Path) -> None:
    texts: dict[str, str] = {
        "summary --csv": outputs["summary csv"][1],
        "summary --exports csv": outputs["summary --exports csv"][1],
        "rules list csv": outputs["rules list csv"][1],
        "prices list csv": outputs["prices list csv"][1],
        "search csv": outputs["search csv"][1],
        "search --lines csv": outputs["search --lines csv"][1],
        "report csv": outputs["report csv"][1],
        "audit jobs.csv": (hostile.folder / "audit" / "jobs.csv").read_bytes().decode("utf-8"),
        "audit teams.csv": (hostile.folder / "audit" / "teams.csv").read_bytes().decode("utf-8"),
    }
    for by in ("team", "job"):
        out = tmp_path / f"{by}.csv"
        code, text = cli("export", "--db", str(hostile.db), "--by", by, "--out", str(out))
        assert code == 0, text
        texts[f"export --by {by}"] = out.read_bytes().decode("utf-8")
    assert set(texts) == {n for names in CSV_OUTPUTS.values() for n in names}
    expected = {  # the payload each CSV carries, neutralised
        "summary --csv": "'" + FORMULA, "rules list csv": "'" + FORMULA, "report csv": "'" + FORMULA_TEAM,
        "audit jobs.csv": "'" + FORMULA_TEAM, "audit teams.csv": "'" + FORMULA_TEAM,
        "export --by team": "'" + FORMULA_TEAM, "export --by job": "'" + FORMULA_TEAM,
    }
    for name, text in texts.items():
        cells = _assert_neutral(text)
        assert_inert(text)
        if name in expected:
            assert expected[name] in cells, (name, cells)


def test_the_csv_writer_neutralises_each_formula_start() -> None:
    import polars as pl

    from hostile_bill import FORMULAS

    text = inert.csv_text(pl.DataFrame({"=head": list(FORMULAS), "n": [-1.5] * len(FORMULAS)}))
    cells = _cells(text)
    assert cells[0] == "'=head"
    assert cells[2::2] == ["'" + inert.clean(f) for f in FORMULAS]  # "\r=1+1": CR stripped, then neutralised
    assert cells[3] == "-1.5000"  # numbers stay numbers


# the only places that may write CSV: the one writer, and the synthetic bill generators (inputs, not outputs)
CSV_WRITER = "billing_audit/inert.py"
GENERATORS = {"connectors/synthetic.py", "connectors/azure/synthetic.py"}


def _csv_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_bytes().decode("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
            if name in ("write_csv", "sink_csv", "to_csv", "csv_text") and owner != "inert":
                found.append(f"{name}() line {node.lineno}")
            if owner == "csv" and name in ("writer", "DictWriter"):
                found.append(f"csv.{name}() line {node.lineno}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(
                r"format\s*'?csv", node.value, re.IGNORECASE) and "COPY" in node.value.upper():
            found.append(f"COPY ... FORMAT csv line {node.lineno}")
    return found


def test_no_csv_is_written_outside_the_one_writer() -> None:
    offenders = {}
    for package in ("billing_audit", "connectors"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == CSV_WRITER or rel in GENERATORS:
                continue
            if calls := _csv_calls(path):
                offenders[rel] = calls
    assert not offenders, f"CSV written outside {CSV_WRITER} (use billing_audit.inert.write_csv / csv_text): {offenders}"


def test_the_scan_sees_a_polars_write_csv(tmp_path: Path) -> None:
    p = tmp_path / "x.py"
    p.write_text("def f(df):\n    return df.write_csv()\n")
    assert _csv_calls(p) == ["write_csv() line 2"]
    p.write_text("from billing_audit import inert\ndef f(df):\n    return inert.csv_text(df)\n")
    assert _csv_calls(p) == []
