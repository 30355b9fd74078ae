"""Where an ingest spends its time: every SQL statement the store runs, timed, plus DuckDB's
operator profile of the big INSERT of each file.

    .venv/bin/python bench/profile_ingest.py DIR [--db /tmp/profile.duckdb] [--top 15]

Writes DuckDB JSON profiles to <db>.profiles/ and prints the slowest statements and the slowest
operators of the first INSERT.  Measures the library in-process (no CLI start-up).
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

import billing_audit


class TimedConnection:
    """Forwards to a DuckDB connection, timing execute() calls."""

    def __init__(self, con: Any, log: list[tuple[float, str]], profile_dir: Path):
        self._con = con
        self._log = log
        self._dir = profile_dir
        self._n = 0

    def execute(self, sql: str, *args: Any, **kw: Any) -> Any:
        big = sql.lstrip().upper().startswith("INSERT INTO LINE_ITEMS")
        if big:
            self._n += 1
            self._con.execute("PRAGMA enable_profiling = 'json'")
            self._con.execute(f"PRAGMA profiling_output = '{self._dir / f'insert-{self._n}.json'}'")
        t = time.perf_counter()
        try:
            if not big:
                return self._con.execute(sql, *args, **kw)
            rows = self._con.execute(sql, *args, **kw).fetchall()  # fetch before the next statement
            self._con.execute("PRAGMA disable_profiling")
            return _Fetched(rows)
        finally:
            self._log.append((time.perf_counter() - t, " ".join(sql.split())[:160]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


class _Fetched:
    def __init__(self, rows: list[Any]):
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows


def _operators(node: Any, out: list[tuple[float, str, int]]) -> None:
    """(seconds, operator, rows) of every node; both the old and the DuckDB 2 JSON profile shapes."""
    if isinstance(node, list):
        for n in node:
            _operators(n, out)
        return
    if not isinstance(node, dict):
        return
    if "operator" in node and not node.get("children"):
        _operators(node["operator"], out)
        return
    name = node.get("operator_name") or node.get("name") or node.get("type") or "?"
    t = node.get("operator_timing", node.get("timing", 0.0)) or 0.0
    rows = node.get("operator_cardinality", node.get("intermediate_rows", node.get("cardinality", 0))) or 0
    info = node.get("extra_info") or {}
    detail = ", ".join(str(x) for x in info.get("Projections", []) if "(" in str(x))[:120] if isinstance(info, dict) else ""
    out.append((float(t), f"{str(name).strip()} {detail}".strip(), int(rows)))
    for child in node.get("children", []):
        _operators(child, out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--db", default="/tmp/profile-ingest.duckdb")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    db = Path(args.db)
    for p in (db, db.with_name(db.name + ".wal")):
        p.unlink(missing_ok=True)
    prof = db.with_name(db.name + ".profiles")
    prof.mkdir(exist_ok=True)
    log: list[tuple[float, str]] = []
    started = time.perf_counter()
    with billing_audit.open(db) as store:
        store.con = TimedConnection(store.con, log, prof)  # type: ignore[assignment]
        t = time.perf_counter()
        rep = store.ingest([args.path])
        ingest_s = time.perf_counter() - t
    total = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sql_s = sum(s for s, _ in log)
    print(f"ingest {rep.rows:,} rows: {ingest_s:.2f} s in store.ingest ({total:.2f} s with open/close), "
          f"{sql_s:.2f} s in {len(log)} SQL statements, peak RSS {rss:,.0f} MiB")
    print(f"\nslowest statements (of {len(log)}):")
    for s, q in sorted(log, reverse=True)[: args.top]:
        print(f"  {s:8.2f} s  {q}")
    first = prof / "insert-1.json"
    if first.exists():
        prof_doc = json.loads(first.read_text())
        ops: list[tuple[float, str, int]] = []
        _operators(prof_doc, ops)
        q, sysinfo = prof_doc.get("query", {}), prof_doc.get("system", {})
        print(f"\nfirst INSERT ({first}): DuckDB cpu_time {q.get('cpu_time', '?')} s, "
              f"peak buffer memory {int(sysinfo.get('peak_buffer_memory', 0)) / 2**20:,.0f} MiB")
        print("slowest operators (thread-seconds):")
        for t, name, rows in sorted(ops, key=lambda o: -o[0])[: args.top]:
            print(f"  {t:8.2f} s  {rows:>12,} rows  {name}")


if __name__ == "__main__":
    main()
