"""When the store's checkpoints compact its tables (billing_audit.store.compaction): not until the deleted rows it
still holds reach a quarter of its rows, then at the next write.

DuckDB's checkpoint compacts ("vacuums") the row groups a transaction deleted from and the short row groups its
appends leave by writing them again, which was most of a refresh's tag checkpoint (a re-delivered month's tag in
a 12 x 1M-line store closed in 0.90 s compacting, 0.06 s not).  Deferred, the deleted rows stay stored but
invisible: the answers are the same (every other test runs with this policy, the incremental property test
included), the file bigger."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit.store import DEAD_ROWS_SHARE, VACUUM_TASKS, compaction, dead_rows
from support import FIXTURES


def _redeliver(db: Path, month: int) -> tuple[bool, tuple[int, int], tuple[int, int]]:
    """One write: the rows of `month` deleted and written anew (a re-delivery), on a connection that decided
    whether to compact as it opened; (compacting, dead and stored rows before, after its checkpoint)."""
    con = duckdb.connect(str(db))
    on = compaction(con)
    before = dead_rows(con)
    con.execute("BEGIN")
    con.execute(f"DELETE FROM t WHERE month = {month}")
    con.execute(f"INSERT INTO t SELECT i, {month}, 'again-' || i FROM range(50000) r(i)")
    con.execute("COMMIT")
    con.close()  # the checkpoint
    con = duckdb.connect(str(db), read_only=True)
    after = dead_rows(con)
    assert con.execute("SELECT count(*), count(DISTINCT month) FROM t").fetchone() == (600_000, 12)
    con.close()
    return on, before, after


def test_deleted_rows_stay_stored_until_a_quarter_of_the_rows_then_the_next_write_compacts(tmp_path: Path) -> None:
    """12 months of 50,000 rows each, interleaved in every row group (as a parallel insert leaves them), each month
    re-delivered in turn: its deleted rows stay stored, 50,000 more each time, until they are a quarter of the
    stored rows; the write that finds them so compacts, and none are left."""
    db = tmp_path / "t.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT i AS id, i % 12 AS month, 'line-' || i AS payload FROM range(600000) r(i)")
    con.close()
    seen = [_redeliver(db, m) for m in range(6)]
    assert [on for on, _, _ in seen] == [False, False, False, False, True, False]
    assert [after for _, _, after in seen] == [(50_000, 650_000), (100_000, 700_000), (150_000, 750_000),
                                               (200_000, 800_000), (0, 600_000), (50_000, 650_000)]
    on, (dead, stored), _ = seen[4]
    assert on and dead == DEAD_ROWS_SHARE * stored  # a quarter exactly compacts; seen[3] had less
    assert seen[3][1][0] < DEAD_ROWS_SHARE * seen[3][1][1]


@pytest.mark.parametrize("deleted, compacts", [(0, False), (249, False), (250, True), (1000, True)])
def test_the_share_that_compacts(deleted: int, compacts: bool) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE a AS SELECT range AS i FROM range(900)")
    con.execute("CREATE TABLE b AS SELECT range AS i FROM range(100)")
    con.execute(f"DELETE FROM a WHERE i < {min(deleted, 900)}")
    con.execute(f"DELETE FROM b WHERE i < {max(0, deleted - 900)}")
    assert dead_rows(con) == (deleted, 1000)
    assert compaction(con) is compacts
    assert con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone() == (VACUUM_TASKS if compacts else 0,)


def test_the_stores_writers_decide_and_its_readers_leave_the_setting(tmp_path: Path) -> None:
    db = tmp_path / "store.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES / "aws" / "cur2"]).errors
        assert s.con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone() == (0,)
        s.con.execute("CREATE TABLE scratch AS SELECT range AS i FROM range(100000)")
        s.con.execute("DELETE FROM scratch WHERE i < 60000")
    with billing_audit.open(db, read_only=True) as s:
        assert dead_rows(s.con)[0] >= 60_000
        assert s.con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone() == (VACUUM_TASKS,)
    from billing_audit.tagging import sandbox

    box = sandbox(str(db))  # a quarter of its rows are deleted ones: the tag's connection compacts
    try:
        assert box.execute("SELECT current_setting('max_vacuum_tasks')").fetchone() == (VACUUM_TASKS,)
        box.execute("DROP TABLE scratch")
    finally:
        box.close()
    with billing_audit.open(db) as s:  # none left: the store's writer does not
        assert dead_rows(s.con)[0] < DEAD_ROWS_SHARE * dead_rows(s.con)[1]
        assert s.con.execute("SELECT current_setting('max_vacuum_tasks')").fetchone() == (0,)
