"""What the price references and the restart windows cost on a tagged store (issue #19: at most 10% of the audit).

    .venv/bin/python bench/overhead.py STORE OUT.json

Writes the wall seconds of each, measured in process on the store ``bench/run.py`` just tagged:

- ``pricing_s``: what a tag run spends on the spot lines' on-demand equivalents (price references first, then the
  bill's own on-demand prices: :func:`billing_audit.pricing.build_spot_od`), run again inside a transaction that
  is rolled back, so the store is left as it was; ``worked_out``: the spot lines it wrote (those the export does
  not price);
- ``windows_s``: what a report spends placing interruptions and restart windows in time (the statements that make
  the temp tables of :func:`billing_audit.report._windows` and the window rows ``ba_win``), out of ``report_s``,
  the whole report built in process.

Not counted (they cannot be taken out of a run): the charge periods the line groups keep for window lines, which
make more groups.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

WINDOW_TABLES = re.compile(r"^\s*CREATE OR REPLACE TEMP TABLE (ba_win|ba_stopped|ba_churn|ba_src|ba_ev|ba_lk|ba_next_ev)\b")


class _Timed:
    """A DuckDB connection whose statements that make the window tables are timed."""

    def __init__(self, con: Any) -> None:
        self._con = con
        self.windows = 0.0

    def execute(self, sql: str, *args: Any, **kw: Any) -> Any:
        started = time.perf_counter()
        result = self._con.execute(sql, *args, **kw)
        if WINDOW_TABLES.match(str(sql)):
            self.windows += time.perf_counter() - started
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def main() -> None:
    store_path, out = Path(sys.argv[1]), Path(sys.argv[2])
    import billing_audit
    from billing_audit import pricing
    from billing_audit.config import load_config
    from billing_audit.report import build_report
    from billing_audit.rollup import completed_tag_run

    with billing_audit.open(store_path) as store:
        run_id = completed_tag_run(store.con)
        if run_id is None:
            raise SystemExit(f"{store_path}: no completed tag run")
        store.con.execute("BEGIN TRANSACTION")
        started = time.perf_counter()
        spot = pricing.build_spot_od(store.con, run_id)
        pricing_s = time.perf_counter() - started
        store.con.execute("ROLLBACK")
    with billing_audit.open(store_path, read_only=True) as store:
        timed = _Timed(store.con)
        store.con = timed  # type: ignore[assignment]
        started = time.perf_counter()
        build_report(store, load_config(None), None, "effective")
        report_s = time.perf_counter() - started
        store.con = timed._con
    out.write_text(json.dumps({"pricing_s": round(pricing_s, 3), "worked_out": spot,
                               "windows_s": round(timed.windows, 3), "report_s": round(report_s, 3)}))


if __name__ == "__main__":
    main()
