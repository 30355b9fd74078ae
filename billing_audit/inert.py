"""Bill text made inert: the one place every output's untrusted text goes through (README: Guarantees).

Everything a bill or a rule file says (tag values, resource names, descriptions, currencies, rule titles,
reasons, file names) is data, never instructions, in every output:

- :func:`clean` strips control characters: terminal escape sequences (ESC [ ... CSI, ESC ] ... OSC such as
  OSC-8 hyperlinks, DCS/PM/APC strings, two-byte ESC sequences and their 8-bit C1 forms), then every C0
  character except tab and newline, DEL and every C1 character.  Terminal tables, CSV and markdown use it
  (HTML uses it too, then escapes);
- :func:`text` makes a terminal cell: cleaned and a rich ``Text``, so ``[/x]`` or ``[link=...]`` is shown
  literally, never read as rich markup;
- :func:`json_inert` keeps JSON exact (it is data: a value says what the bill says) but writes every control
  character as a ``\\u`` escape, so no raw ESC, BEL, DEL or C1 byte is in the file;
- :func:`write_csv` / :func:`csv_text` are the one CSV writer of the tool: RFC 4180 (CRLF, quoted as needed),
  control characters stripped, text cells starting with ``=``, ``+``, ``-``, ``@``, tab or CR prefixed with
  ``'`` so they cannot become spreadsheet formulas.  tests/test_inert_outputs.py fails if another module
  writes CSV.  With ``bom`` (or inside :func:`csv_bom`, the commands' ``--bom``) the text starts with a UTF-8
  byte order mark, for spreadsheets that read CSV as UTF-8 only then.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import io
import re
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl
    from rich.text import Text

# Written so that Python's re and polars' (Rust) regex read it the same way.
_SEQUENCES = (
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"  # CSI: colours, cursor moves, erase
    r"|\x1b[\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC (links, titles), DCS, SOS, PM, APC: to the end if open
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)"  # their 8-bit forms, when terminated
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]"  # two-byte and nF escapes (ESC c, ESC ( B, ...)
)
_CONTROLS = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 but tab and newline, DEL, C1
SEQUENCES = re.compile(_SEQUENCES)
CONTROLS = re.compile(_CONTROLS)
# what may not appear raw in JSON: C0 (valid JSON escapes those inside strings already), DEL and C1
_JSON_RAW = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean(value: str) -> str:
    """``value`` without escape sequences and control characters (tab and newline stay)."""
    if value.isprintable():  # the common case, fast
        return value
    return CONTROLS.sub("", SEQUENCES.sub("", value))


def clean_value(value: Any) -> Any:
    """Strings cleaned, inside lists, tuples and dicts too; other values as they are."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list | tuple):
        return type(value)(clean_value(v) for v in value)
    if isinstance(value, dict):
        return {clean_value(k): clean_value(v) for k, v in value.items()}
    return value


def clean_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Every text column (and list-of-text column) of ``df`` cleaned, in polars."""
    import polars as pl  # here: the commands that print text alone (ingest) need no polars


    def fix(e: pl.Expr) -> pl.Expr:
        return e.str.replace_all(_SEQUENCES, "").str.replace_all(_CONTROLS, "")

    exprs = []
    for name, dtype in df.schema.items():
        if dtype == pl.String:
            exprs.append(fix(pl.col(name)))
        elif isinstance(dtype, pl.List) and dtype.inner == pl.String:
            exprs.append(pl.col(name).list.eval(fix(pl.element())))
    return df.with_columns(exprs) if exprs else df


def text(value: Any, style: str = "") -> Text:
    """A terminal cell or line: cleaned, and a rich Text (never parsed as markup or emoji codes)."""
    from rich.text import Text

    return Text("" if value is None else clean(str(value)), style=style)


def json_inert(doc: str) -> str:
    """JSON text with every raw control character written as a ``\\u`` escape (the values stay exact).

    Outside strings valid JSON holds only blanks, so each such character is inside a string, where the escape
    means the same character."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", doc)


# -- CSV: the one writer ------------------------------------------------------------------------------------------
def safe_cell(value: Any, places: int | None = 4) -> str:
    """A CSV cell: numbers as numbers (rounded to ``places`` decimals, or exact with None), text cleaned and
    unable to become a spreadsheet formula."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value if places is None else value.quantize(Decimal(1).scaleb(-places)), "f")
    if isinstance(value, float):
        return repr(value) if places is None else f"{value:.{places}f}"
    if isinstance(value, int | bool):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        value = "; ".join("" if v is None else str(v) for v in value)
    cell = clean(str(value))
    if cell.startswith(FORMULA_START):
        return "'" + cell
    return cell


BOM = "\ufeff"
_BOM: contextvars.ContextVar[bool] = contextvars.ContextVar("billing_audit_csv_bom", default=False)


@contextlib.contextmanager
def csv_bom(on: bool = True) -> Iterator[None]:
    """Every CSV written inside starts with a UTF-8 byte order mark (a command's ``--bom``)."""
    token = _BOM.set(on)
    try:
        yield
    finally:
        _BOM.reset(token)


# The report's figures that are not measured where they are NULL (spot savings without an on-demand price):
# "n/a" in a CSV, never an empty cell a spreadsheet sums as 0.
NOT_MEASURED = frozenset({"on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings", "savings_eroded_pct",
                          "savings_coverage_pct"})


def write_csv(df: pl.DataFrame, out: io.TextIOBase | Any, places: int | None = 4, bom: bool | None = None) -> None:
    """``df`` as RFC 4180 CSV (CRLF line ends, quoted as needed) on ``out``: safe cells, safe header.
    Money has ``places`` decimals (the report's and the finance file's 4), or all of them with None; a
    :data:`NOT_MEASURED` column's NULL is ``n/a``.  ``bom``: start with a UTF-8 byte order mark (None: as
    :func:`csv_bom` says; default none)."""
    if _BOM.get() if bom is None else bom:
        out.write(BOM)
    w = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    w.writerow([safe_cell(c) for c in df.columns])
    na = [c in NOT_MEASURED for c in df.columns]
    for row in df.iter_rows():
        w.writerow(["n/a" if v is None and na[i] else safe_cell(v, places) for i, v in enumerate(row)])


def csv_text(df: pl.DataFrame, places: int | None = 4, bom: bool | None = None) -> str:
    """``df`` as CSV text (see :func:`write_csv`)."""
    buf = io.StringIO()
    write_csv(df, buf, places, bom)
    return buf.getvalue()
