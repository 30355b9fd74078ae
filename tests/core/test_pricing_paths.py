"""A full tag run with no price reference reads the spot lines once, in the INSERT into spot_od (pricing.classify's
fused path); otherwise they are made into a temp table first.  Both must write the same on-demand equivalents and
the same bill prices, line for line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import billing_audit
from billing_audit import pricing
from billing_audit.rollup import completed_tag_run
from support import FIXTURES

SETS = [["aws"], ["azure"], ["gcp"], ["focus"], ["scenarios"], ["aws", "azure", "gcp"]]


def _priced(con: Any, run_id: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Every spot line's equivalent (spot_od as build_spot_od writes it now, with the export-priced lines it does
    not hold: pricing.od_rows_sql) and spot_bill (rolled back after)."""
    con.execute("BEGIN TRANSACTION")
    try:
        pricing.build_spot_od(con, run_id)
        assert con.execute("SELECT count(*) FROM spot_od WHERE od_source = 'export'").fetchone() == (0,)
        od = con.execute(f"SELECT * EXCLUDE (run_id) FROM ({pricing.od_rows_sql()}) ORDER BY ALL").fetchall()
        bill = con.execute("SELECT * EXCLUDE (run_id) FROM spot_bill ORDER BY ALL").fetchall()
    finally:
        con.execute("ROLLBACK")
    return od, bill


@pytest.mark.parametrize("names", SETS, ids=["+".join(s) for s in SETS])
def test_the_spot_lines_read_once_price_as_from_their_temp_table(names: list[str], tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    with billing_audit.open(tmp_path / "s.duckdb") as store:
        assert store.ingest([FIXTURES / n for n in names]).rows > 0
        store.tag()
        run_id = completed_tag_run(store.con)
        assert run_id is not None
        paths: list[bool] = []
        real = pricing._price_spot

        def spy(*args: Any, **kw: Any) -> None:
            paths.append(kw.get("refs", True))
            real(*args, **kw)

        monkeypatch.setattr(pricing, "_price_spot", spy)
        fused = _priced(store.con, run_id)
        assert paths == [False]  # no price reference: the fused path
        # as if a reference were held (none prices a line: the table is empty): the spot lines' temp table
        monkeypatch.setattr(pricing, "_any_rows", lambda con, table: True)
        table = _priced(store.con, run_id)
        assert paths == [False, True]
        assert fused == table
        assert fused[0], "the set has spot lines"
        by_source = {r[3] for r in fused[0]}
        assert by_source & {"export", "bill"}, by_source
