"""The ingest's tag memo (reader.MappedFile.tag_memo): each distinct tag input's map is built once and joined to
its lines.  The store must hold exactly the maps that building them line by line gives (the memo's own fallback,
taken when a file has about as many distinct inputs as lines), for every export family that says its tag inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import billing_audit
from billing_audit import reader
from support import FIXTURES

FAMILIES = ["aws", "azure", "focus", "gcp", "csv-quirks", "scenarios"]


def _tags(db: Path) -> list[tuple[Any, ...]]:
    with billing_audit.open(db) as store:
        return store.con.execute(
            "SELECT x_SourceFile, x_SourceRow, x_SourceFormat, CAST(Tags AS VARCHAR), cardinality(Tags) "
            "FROM line_items ORDER BY ALL").fetchall()


def _ingest(paths: list[Path], db: Path, monkeypatch: pytest.MonkeyPatch, memo: bool) -> dict[str, int]:
    """Ingest with the memo (returns, per format, how many files read their maps from it) or without it."""
    used: dict[str, int] = {}
    real = reader.MappedFile.tag_memo

    def spy(self: reader.MappedFile, con: Any) -> str | None:
        if not memo:
            return None
        sql = real(self, con)
        if sql is not None:
            used[self.fmt.id] = used.get(self.fmt.id, 0) + 1
        return sql

    with monkeypatch.context() as m:
        m.setattr(reader.MappedFile, "tag_memo", spy)
        with billing_audit.open(db) as store:
            assert store.ingest(paths).rows > 0
    return used


@pytest.mark.parametrize("family", FAMILIES)
def test_the_memo_gives_every_line_the_map_built_line_by_line(family: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    paths = [FIXTURES / family]
    used = _ingest(paths, tmp_path / "memo.duckdb", monkeypatch, memo=True)
    _ingest(paths, tmp_path / "lines.duckdb", monkeypatch, memo=False)
    got, want = _tags(tmp_path / "memo.duckdb"), _tags(tmp_path / "lines.duckdb")
    assert got == want
    assert any(row[4] for row in want), "the family's fixtures carry tags"
    tagged = {row[2] for row in want if row[4]}
    # every format of these fixtures that says its tag inputs read its maps from the memo (GCP's labels do not)
    assert tagged - {"gcp-billing", "gcp-billing-resource"} <= set(used), (tagged, used)


def _cur(path: Path, tags: list[dict[str, str | None]]) -> None:
    n = len(tags)
    cols: dict[str, Any] = {
        "line_item_usage_start_date": pa.array(["2026-10-01T00:00:00Z"] * n),
        "line_item_usage_end_date": pa.array(["2026-10-01T01:00:00Z"] * n),
        "line_item_line_item_type": pa.array(["Usage"] * n),
        "line_item_unblended_cost": pa.array([1.25] * n),
        "line_item_usage_account_id": pa.array(["111122223333"] * n),
        "bill_payer_account_id": pa.array(["111122223333"] * n),
        "line_item_product_code": pa.array(["AmazonEC2"] * n),
        "line_item_usage_type": pa.array(["USE1-SpotUsage:p4d.24xlarge"] * n),
        "line_item_resource_id": pa.array([f"i-{i % 7:04d}" for i in range(n)]),
    }
    for key in ("resource_tags_user_team", "resource_tags_user_training_job", "resource_tags_aws_created_by"):
        cols[key] = pa.array([t.get(key) for t in tags], pa.string())
    pq.write_table(pa.table(cols), path)


VALUES: list[str | None] = [None, "", "  ", "ml-a", " ml-a ", "ML-A", "ml\u00e9", "x\ty", "a,b", '{"k": 1}']


def test_the_memo_keeps_empty_blank_null_and_near_duplicate_values_apart(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"resource_tags_user_team": VALUES[i % len(VALUES)],
             "resource_tags_user_training_job": VALUES[(i // len(VALUES)) % len(VALUES)],
             "resource_tags_aws_created_by": VALUES[(i * 7) % len(VALUES)]} for i in range(3000)]
    folder = tmp_path / "cur"
    folder.mkdir()
    _cur(folder / "report-00001.snappy.parquet", rows)
    used = _ingest([folder], tmp_path / "memo.duckdb", monkeypatch, memo=True)
    _ingest([folder], tmp_path / "lines.duckdb", monkeypatch, memo=False)
    assert used == {"aws-cur": 1}
    got = _tags(tmp_path / "memo.duckdb")
    assert got == _tags(tmp_path / "lines.duckdb")
    # each line's map as the ingest documents it: keys without resource_tags_[user_], values trimmed of ASCII
    # whitespace, empty, blank and NULL values left out; an untagged line has the empty map, not NULL
    keys = {"resource_tags_aws_created_by": "aws_created_by", "resource_tags_user_team": "team",
            "resource_tags_user_training_job": "training_job"}
    want = {i + 1: {keys[c]: v.strip(" \t\n\r\v\f") for c, v in row.items() if v and v.strip(" \t\n\r\v\f")}
            for i, row in enumerate(rows)}
    with billing_audit.open(tmp_path / "memo.duckdb") as store:
        have = dict(store.con.execute("SELECT x_SourceRow, Tags FROM line_items").fetchall())
    assert have == want
    assert have[1] == {} and have[5] == {"aws_created_by": "a,b", "team": "ml-a"}
    assert len({tuple(sorted(m.items())) for m in have.values()}) > 50


def test_a_file_with_about_as_many_tag_inputs_as_lines_builds_its_maps_line_by_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rows: list[dict[str, str | None]] = [{"resource_tags_user_team": f"team-{i}",
                                          "resource_tags_user_training_job": None} for i in range(400)]
    rows += [{"resource_tags_user_team": "shared", "resource_tags_user_training_job": "j"}] * 100
    folder = tmp_path / "cur"
    folder.mkdir()
    _cur(folder / "report-00001.snappy.parquet", rows)
    monkeypatch.setattr(reader, "TAG_MEMO_MIN", 0)
    used = _ingest([folder], tmp_path / "s.duckdb", monkeypatch, memo=True)
    assert used == {}  # 401 distinct inputs over 500 lines: no memo
    got = _tags(tmp_path / "s.duckdb")
    assert len(got) == 500 and {r[3] for r in got if r[1] > 400} == {"{team=shared, training_job=j}"}
    assert got[0][3] == "{team=team-0}"
    with billing_audit.open(tmp_path / "s.duckdb") as store:  # nothing of the memo stays behind
        assert store.con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = ?",
                                 [reader.TAG_MEMO]).fetchone() == (0,)
