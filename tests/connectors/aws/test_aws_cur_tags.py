"""Legacy CUR tag columns to the canonical ``Tags`` map: the direct map of unique keys is the macro path's map."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import billing_audit
from connectors.aws import cur

FIXTURE = next((Path(__file__).resolve().parents[3] / "fixtures/aws/cur-legacy-parquet").rglob("*-00001.snappy.parquet"))

# one line per case: NULL, empty and blank values are left out, values are trimmed, case is kept
VALUES: list[dict[str, str | None]] = [
    {"resource_tags_user_team": "ml-infra", "resource_tags_aws_created_by": "arn:aws:iam::1:user/a",
     "resource_tags_user_zeta": "z", "resource_tags_xyz": "x"},
    {"resource_tags_user_team": None, "resource_tags_aws_created_by": "", "resource_tags_user_zeta": "  ",
     "resource_tags_xyz": "\t padded \n"},
    {"resource_tags_user_team": None, "resource_tags_aws_created_by": None, "resource_tags_user_zeta": None,
     "resource_tags_xyz": None},
    {"resource_tags_user_team": "Mixed Case", "resource_tags_aws_created_by": "b", "resource_tags_user_zeta": "",
     "resource_tags_xyz": "x"},
]


def _write(folder: Path, tag_columns: list[str], values: list[dict[str, str | None]]) -> Path:
    """The legacy CUR fixture's first file, its tag columns replaced by ``tag_columns`` holding ``values``."""
    base = pq.read_table(FIXTURE)
    base = base.drop([c for c in base.column_names if c.startswith("resource_tags_")])
    rows = base.slice(0, len(values))
    for col in tag_columns:
        rows = rows.append_column(col, pa.array([v.get(col) for v in values], pa.string()))
    out = folder / "cur" / "tags-cur" / "tags-cur" / "year=2026" / "month=10"
    out.mkdir(parents=True)
    pq.write_table(rows, out / "tags-cur-00001.snappy.parquet")
    return folder


def _tags(db: Path, folder: Path) -> dict[int, list[tuple[str, str]]]:
    """Each line's tags as (key, value) pairs in the map's own order, by source row."""
    with billing_audit.open(db) as store:
        assert store.ingest([folder]).rows > 0
        return {r: list(t.items()) for r, t in
                store.con.execute("SELECT x_SourceRow, Tags FROM line_items ORDER BY x_SourceRow").fetchall()}


def _macro_path(tag_cols: list[str]) -> str:
    return f"ba_tags_unique({cur._tag_entries(tag_cols)})"


def test_unique_keys_build_the_macro_paths_map(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cols = list(VALUES[0])
    direct = _tags(tmp_path / "direct.duckdb", _write(tmp_path / "direct", cols, VALUES))
    monkeypatch.setattr(cur, "_unique_tags", _macro_path)
    macro = _tags(tmp_path / "macro.duckdb", _write(tmp_path / "macro", cols, VALUES))
    assert direct == macro
    # the keys in the order of their (sorted) columns, not of the keys: xyz (resource_tags_xyz) comes last
    assert direct == {
        1: [("aws_created_by", "arn:aws:iam::1:user/a"), ("team", "ml-infra"), ("zeta", "z"), ("xyz", "x")],
        2: [("xyz", "padded")],
        3: [],
        4: [("aws_created_by", "b"), ("team", "Mixed Case"), ("xyz", "x")],
    }


def test_unique_keys_render_the_direct_map() -> None:
    sql = cur.CurLegacy().render({"line_item_unblended_cost": "DOUBLE", "resource_tags_user_team": "VARCHAR",
                                  "resource_tags_aws_created_by": "VARCHAR"})
    assert "map_from_entries(list_filter([{'key': 'aws_created_by'" in sql and "ba_tags" not in sql


def test_colliding_keys_merge_through_the_macro(tmp_path: Path) -> None:
    """``resourceTags/team`` beside ``resourceTags/user:team``: one key, the first non-empty value in column order."""
    cols = ["resource_tags_team", "resource_tags_user_team", "resource_tags_user_name"]
    values: list[dict[str, str | None]] = [
        {"resource_tags_team": "a", "resource_tags_user_team": "b", "resource_tags_user_name": "n"},
        {"resource_tags_team": "", "resource_tags_user_team": " b ", "resource_tags_user_name": None},
        {"resource_tags_team": None, "resource_tags_user_team": None, "resource_tags_user_name": ""},
    ]
    assert "ba_tags(" in cur.CurLegacy().render(dict.fromkeys(cols, "VARCHAR"))
    assert _tags(tmp_path / "s.duckdb", _write(tmp_path / "c", cols, values)) == {
        1: [("name", "n"), ("team", "a")],  # merged keys are sorted
        2: [("team", "b")],
        3: [],
    }
