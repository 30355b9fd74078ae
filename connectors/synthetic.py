"""What every provider's synthetic export writer shares: the estate's teams and jobs, template pools,
row-level draws in DuckDB SQL over ``range()``, and parallel ``COPY`` of the parts.

Each provider package has a ``synthetic`` module with ``ROWS_PER_FILE`` and
``write(con, rows, out, seed, per_file) -> list[Path]`` (its real format and folder layout);
``billing_audit.generate`` finds it through the connector registry.  The same
(provider, rows, seed, rows_per_file) gives the same files with the same DuckDB version
(``hash()`` is DuckDB's).  No Python runs per row.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from billing_audit.errors import BillingAuditError

PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION snappy, ROW_GROUP_SIZE 122880"

HOURS = 744  # October 2026
PERIOD = "2026-10-01"

# What a line is, as a share of the month's lines (parts per million).
RESTART_FEE_PPM = 1000  # ~0.1%

TEAMS = ["vision", "nlp", "speech", "research", "recsys", "platform"]
MODELS = ["resnet-sweep", "detr-large", "llm-pretrain", "t5-xxl-ft", "whisper-ft", "bert-distill", "vit-huge",
          "dlrm-train"]


def _jobs(rng: random.Random) -> list[tuple[str, str]]:
    """48 training jobs: (job, team)."""
    out: list[tuple[str, str]] = []
    for i in range(48):
        team = TEAMS[i % len(TEAMS)]
        out.append((f"{MODELS[(i * 5) % len(MODELS)]}-{i + 1}", team))
    rng.shuffle(out)
    return out


@dataclass
class Pool:
    """Templates of one kind of line and the share of lines (ppm) drawn from them."""

    kind: str
    ppm: int
    templates: list[dict[str, Any]]


# The template columns every pool's templates carry (how a line's amount and price are drawn).
MODEL_FIELDS = [
    pa.field("tid", pa.int64()), pa.field("kind", pa.string()), pa.field("amt_model", pa.int32()),
    pa.field("amt_lo", pa.float64()), pa.field("amt_hi", pa.float64()), pa.field("amt_digits", pa.int32()),
    pa.field("partial_permille", pa.int32()), pa.field("rate", pa.float64()), pa.field("od_rate", pa.float64()),
    pa.field("whole_month", pa.bool_()),
]

# amount models: how a line's quantity is drawn
HOURLY, UNIFORM, COUNT = 0, 1, 2


def _pick_sql(pools: list[Pool]) -> str:
    """SQL picking a template id from hash h (kind by share) and h1 (template within the kind)."""
    total = sum(p.ppm for p in pools if p.templates)
    arms, acc, off = [], 0, 0
    for p in pools:
        if not p.templates:
            continue
        acc += p.ppm
        bound = round(acc * 1_000_000 / total)
        arms.append(f"WHEN h % 1000000 < {bound} THEN {off} + CAST(h1 % {len(p.templates)} AS BIGINT)")
        off += len(p.templates)
    return "CASE " + " ".join(arms) + f" ELSE {off - 1} END"


def _flatten(pools: list[Pool]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in pools:
        for t in p.templates:
            out.append({"tid": len(out), "kind": p.kind, **t})
    return out


def _register(con: duckdb.DuckDBPyConnection, name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> None:
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    con.register(f"{name}_arrow", table)
    con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _parts(rows: int, per_file: int) -> list[tuple[int, int]]:
    n = max(1, math.ceil(rows / per_file))
    bounds = [rows * k // n for k in range(n + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(n)]


def _connect() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    _settings(con)
    return con


def _settings(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET preserve_insertion_order = true")
    con.execute("SET enable_progress_bar = false")
    con.execute("SET TimeZone = 'UTC'")


def _copy_parts(con: duckdb.DuckDBPyConnection, jobs: list[tuple[str, Path]], options: str,
                after: Callable[[Path], None] | None = None) -> None:
    """Run one COPY per part, as many at once as DuckDB has threads.

    A COPY over ``range()`` runs on one thread (the table function is not parallel), so the
    parts of a multi-part export are written side by side, each on its own cursor.
    """

    def run(job: tuple[str, Path]) -> None:
        sql, path = job
        cur = con.cursor()
        try:
            _settings(cur)
            cur.execute(f"COPY ({sql}) TO '{path}' ({options})")
        finally:
            cur.close()
        if after is not None:
            after(path)

    threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])  # type: ignore[index]
    workers = max(1, min(threads, len(jobs)))
    if workers == 1:
        for job in jobs:
            run(job)
        return
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(run, job) for job in jobs]:
            f.result()


# Row-level draws shared by every provider: h picks the kind, h1 the template, h2 the quantity,
# h3 the hour / day.  amount: HOURLY -> 1.0, or a partial hour in partial_permille of lines;
# UNIFORM -> lo..hi rounded to digits; COUNT -> 1..hi.
DRAWS_SQL = """
WITH r AS (SELECT i, hash(i, {seed}) AS h, hash(i, {seed}, 1) AS h1 FROM range({a}, {b}) AS g(i)),
p AS (SELECT i, h, {pick} AS tid, hash(h, 2) AS h2, hash(h, 3) AS h3 FROM r),
x AS (
  SELECT p.i, p.h, p.h2, p.h3, t.*,
    CASE t.amt_model
      WHEN 0 THEN CASE WHEN p.h2 % 1000 < t.partial_permille
                       THEN round(0.05 + CAST((p.h2 // 1000) % 9000 AS DOUBLE) / 10000.0, 4) ELSE 1.0 END
      WHEN 2 THEN CAST(1 + (p.h2 // 1000) % CAST(t.amt_hi AS UBIGINT) AS DOUBLE)
      ELSE round(t.amt_lo + CAST((p.h2 // 1000) % 1000000 AS DOUBLE) / 1000000.0 * (t.amt_hi - t.amt_lo), t.amt_digits)
    END AS amount
  FROM p JOIN tmpl AS t USING (tid)
)
"""


def hash_str(s: str) -> int:
    """A stable small hash of a string (Python's hash() is salted per process)."""
    h = 0
    for ch in s:
        h = (h * 131 + ord(ch)) % 1_000_003
    return h


def _hexid(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _guid(rng: random.Random) -> str:
    h = _hexid(rng, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:]}"


Writer = Callable[[duckdb.DuckDBPyConnection, int, Path, int, int], list[Path]]


def generate(write: Writer, default_per_file: int, rows: int, out_dir: str | Path, seed: int = 0,
             rows_per_file: int | None = None) -> list[Path]:
    """Run one provider's ``write`` for ``rows`` lines under ``out_dir`` on a fresh DuckDB connection.

    ``rows_per_file`` caps a part's size (default: the provider's ``ROWS_PER_FILE``); parts are of
    near-equal size.  Returns the data files written, in order.
    """
    if rows < 1:
        raise BillingAuditError(f"rows must be at least 1 (got {rows})")
    per_file = rows_per_file or default_per_file
    if per_file < 1:
        raise BillingAuditError(f"rows_per_file must be at least 1 (got {per_file})")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    con = _connect()
    try:
        return write(con, int(rows), out, int(seed), int(per_file))
    finally:
        con.close()


# -- the small writers every provider's exports are made of (the estates above and fixtures/gen_*.py) --

BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark Azure writes

# Arrow types of the export columns.
STR = pa.string()
F64 = pa.float64()
TS_MS = pa.timestamp("ms")
SMAP = pa.map_(pa.string(), pa.string())
DMAP = pa.map_(pa.string(), pa.float64())


def csv_bytes(header: Iterable[str], rows: Iterable[Mapping[str, Any]], *, keys: Iterable[str] | None = None,
              value: Callable[[Any], object] = lambda v: v, newline: str = "\n", quote_all: bool = False,
              bom: bool = False) -> bytes:
    """A CSV file: ``header``, then each row's values (through ``value``) of ``keys`` (default: the header);
    values quoted where needed, or all of them."""
    names = list(header)
    cols = names if keys is None else list(keys)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=newline, quoting=csv.QUOTE_ALL if quote_all else csv.QUOTE_MINIMAL)
    w.writerow(names)
    for r in rows:
        w.writerow([value(r[c]) for c in cols])
    return (BOM if bom else b"") + buf.getvalue().encode("utf-8")


def gzip_bytes(data: bytes) -> bytes:
    """gzip without a timestamp in the header, so the same data gives the same bytes."""
    return gzip.compress(data, mtime=0)


def write_json(path: Path, obj: object) -> None:
    """A manifest as the providers write them: indented JSON and a final newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")
