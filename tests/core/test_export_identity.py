"""Deliveries as they come (issue #14, cases 0 and 10): a delivery replaces only an older delivery of the same
export; exports that deliver the same lines keep one, said; the newest delivery is the one the files say is newest."""

from __future__ import annotations

import json
import os
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

import billing_audit
from billing_audit.store import OverlapPolicy
from support import FIXTURES

EA_RUN = FIXTURES / "azure/ea-actual-csv/costexports/ea/20261001-20261031/gpu-ea-actual/202611020512"
RUN_ID = "6c1e9f40-0000-4000-8000-00000000e001"
OLD_PARQUET = FIXTURES / "azure/ea-old-parquet/costexports/labs/gpu-labs-actual/20261001-20261031"


def _totals(db: Path) -> tuple[int, Decimal]:
    with billing_audit.open(db) as s:
        row = s.con.execute("SELECT count(*), sum(BilledCost) FROM line_items").fetchone()
    assert row is not None
    return int(row[0]), Decimal(row[1] or 0)


def _export(root: Path, name: str, run: str, files: tuple[str, ...] = ("part_0_0001.csv", "part_1_0001.csv"),
            edit=None) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the EA export run fixture as export ``name`` (its own resource id, run id and folder)."""
    folder = root / "costexports/ea/20261001-20261031" / name / "202611020512" / run
    folder.mkdir(parents=True)
    manifest = json.loads((EA_RUN / RUN_ID / "manifest.json").read_text(encoding="utf-8"))
    manifest["exportConfig"]["exportName"] = name
    manifest["exportConfig"]["resourceId"] = manifest["exportConfig"]["resourceId"].replace("gpu-ea-actual", name)
    manifest["runInfo"]["runId"] = run
    blobs = []
    for b in manifest["blobs"]:
        fname = b["blobName"].rsplit("/", 1)[-1]
        if fname not in files:
            continue
        text = (EA_RUN / RUN_ID / fname).read_text(encoding="utf-8-sig")
        if edit:
            text = edit(text)
        (folder / fname).write_text("\ufeff" + text, encoding="utf-8")
        blobs.append({**b, "blobName": f"ea/20261001-20261031/{name}/202611020512/{run}/{fname}"})
    manifest["blobs"], manifest["blobCount"] = blobs, len(blobs)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def _other_scope(text: str) -> str:
    """The same kind of lines for other subscriptions (an export scoped to them)."""
    return text.replace("3f2a1b0c-", "4e3b2c1d-")


def test_two_exports_of_one_billing_account_and_month_both_count(tmp_path: Path) -> None:
    a = _export(tmp_path / "a", "llm-actual", "11111111-0000-4000-8000-0000000000a1")
    b = _export(tmp_path / "b", "eval-actual", "22222222-0000-4000-8000-0000000000b2", edit=_other_scope)
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        r1 = s.ingest([a])
        r2 = s.ingest([b])
        owners = s.owners()
    assert r1.rows == 13 and r2.rows == 13
    assert r2.replaced_rows == 0 and r2.overlapped_rows == 0 and not r2.notes
    lines, cost = _totals(db)
    with billing_audit.open(tmp_path / "one.duckdb") as s:
        s.ingest([EA_RUN])
        one = s.con.execute("SELECT sum(BilledCost) FROM line_items").fetchone()
    assert one is not None
    assert lines == 26 and cost == 2 * Decimal(one[0])
    exports = sorted(owners.filter(owners["period"] == "2026-10")["export"].to_list())
    assert [e.split("@")[0] for e in exports] == ["azure-export:eval-actual", "azure-export:llm-actual"]


@pytest.mark.parametrize("order", ["big-first", "small-first"])
def test_overlapping_exports_keep_the_larger_and_say_so(tmp_path: Path, order: str) -> None:
    big = _export(tmp_path / "a", "ba-actual", "11111111-0000-4000-8000-0000000000a1")
    small = _export(tmp_path / "b", "sub-actual", "22222222-0000-4000-8000-0000000000b2", files=("part_0_0001.csv",))
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        reports = [s.ingest([p]) for p in ((big, small) if order == "big-first" else (small, big))]
        owners = s.owners()
    notes = [n for r in reports for n in r.notes]
    assert len(notes) == 1, notes
    assert "deliver 6 of the same lines" in notes[0] and "counted once, in 'azure-export:ba-actual" in notes[0]
    assert "(more lines)" in notes[0] and "it is set aside" in notes[0]
    assert sum(r.overlapped_rows for r in reports) == 6
    assert _totals(db)[0] == 13
    assert owners["export"].str.starts_with("azure-export:ba-actual").all()


def test_overlap_policy_prefer_and_keep_both(tmp_path: Path) -> None:
    big = _export(tmp_path / "a", "ba-actual", "11111111-0000-4000-8000-0000000000a1")
    small = _export(tmp_path / "b", "sub-actual", "22222222-0000-4000-8000-0000000000b2", files=("part_0_0001.csv",))
    with billing_audit.open(tmp_path / "p.duckdb") as s:
        s.ingest([big], overlap=OverlapPolicy(prefer=("sub-actual",)))
        r = s.ingest([small], overlap=OverlapPolicy(prefer=("sub-actual",)))
    # the preferred export keeps the shared lines; the other keeps the lines only it has: none lost, none twice
    assert "counted once, in 'azure-export:sub-actual" in r.notes[0] and "(listed first in [exports] prefer)" in r.notes[0]
    assert "keeps its 7 other lines" in r.notes[0] and r.overlapped_rows == 6
    assert _totals(tmp_path / "p.duckdb")[0] == 13
    with billing_audit.open(tmp_path / "b.duckdb") as s:
        s.ingest([big], overlap=OverlapPolicy(keep="both"))
        r = s.ingest([small], overlap=OverlapPolicy(keep="both"))
    assert "both counted" in r.notes[0] and r.overlapped_rows == 0
    assert _totals(tmp_path / "b.duckdb")[0] == 19


def _snapshot(src: Path, dst: Path, keep_days_before: str | None) -> None:
    """A legacy run file: the fixture's run, or an earlier snapshot holding the usage before a day."""
    con = duckdb.connect()
    where = f"WHERE CAST(\"Date\" AS VARCHAR) < '{keep_days_before}'" if keep_days_before else ""
    con.execute(f"COPY (SELECT * FROM read_parquet('{src}') {where}) TO '{dst}' (FORMAT parquet)")
    con.close()


def test_legacy_azure_runs_in_one_folder_are_snapshots_and_only_the_newest_counts(tmp_path: Path) -> None:
    folder = tmp_path / "costexports/labs/gpu-labs-actual/20261001-20261031"
    folder.mkdir(parents=True)
    src = next(OLD_PARQUET.glob("*.parquet"))
    shutil.copy(src, folder / src.name)  # the newest run: the whole month
    dates = duckdb.connect().execute(f"SELECT DISTINCT CAST(\"Date\" AS VARCHAR) d FROM read_parquet('{src}') "
                                     "ORDER BY d").fetchall()
    assert len(dates) > 1
    older = folder / "gpu-labs-actual_9f8e7d6c.parquet"
    _snapshot(src, older, dates[-1][0])  # an earlier run: without the last day
    os.utime(older, (2_000_000_000, 2_000_000_000))  # and `touch`ed to look newest
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        report = s.ingest([folder])
        owner = s.owners()
    with billing_audit.open(tmp_path / "one.duckdb") as s:
        s.ingest([src])
    whole = _totals(tmp_path / "one.duckdb")
    assert whole[0] == 12 and round(whole[1], 2) == Decimal("74.22")  # the figures
    assert _totals(db) == whole
    assert report.count("ingested") + report.count("superseded") == 2
    assert owner["delivery"].to_list()[0].endswith(f"({folder / src.name})")
    assert owner["dated_by"].to_list() == ["latest usage"]
    with billing_audit.open(db) as s:  # the same again, in any order: nothing changes
        again = s.ingest([older, folder / src.name])
    assert again.count("ingested") == 0 and _totals(db) == whole


def _manifestless(root: Path) -> Path:
    folder = root / "costexports/ea/20261001-20261031/gpu-ea-actual/202611020512" / RUN_ID
    folder.mkdir(parents=True)
    for p in (EA_RUN / RUN_ID).glob("part_*.csv"):
        shutil.copy(p, folder / p.name)
    return folder


def test_one_file_of_a_folder_delivery_is_ingested_with_the_rest_of_it(tmp_path: Path) -> None:
    folder = _manifestless(tmp_path)
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        s.ingest([folder])
        assert _totals(db)[0] == 13
        r = s.ingest([folder / "part_1_0001.csv"])  # after fixing that one file
    assert _totals(db)[0] == 13
    assert any("ingested with the 1 other file(s) of its earlier ingest (part_0_0001.csv)" in n for n in r.notes), r.notes
    (folder / "part_0_0001.csv").unlink()
    with billing_audit.open(db) as s:
        r = s.ingest([folder / "part_1_0001.csv"])
    assert _totals(db)[0] == 7
    assert any("1 file(s) of its earlier ingest are no longer there" in n and "part_0_0001.csv" in n
               for n in r.notes), r.notes


def _bump_a_cost(f: Path) -> None:
    """Raise one digit of the first line's CostInBillingCurrency: the file keeps its size, its totals change."""
    lines = f.read_bytes().split(b"\n")
    header = [h.strip().lstrip(b"\xef\xbb\xbf") for h in lines[0].split(b",")]
    col = header.index(b"CostInBillingCurrency")
    cells = lines[1].split(b",")
    old = cells[col]
    i = next(k for k, ch in enumerate(old) if chr(ch).isdigit() and chr(ch) != "9")
    cells[col] = old[:i] + str(int(chr(old[i])) + 1).encode() + old[i + 1:]
    lines[1] = b",".join(cells)
    f.write_bytes(b"\n".join(lines))


def test_a_rewrite_with_the_same_size_and_mtime_is_read_again(tmp_path: Path) -> None:
    folder = _manifestless(tmp_path)
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        s.ingest([folder])
    before = _totals(db)
    f = folder / "part_0_0001.csv"
    st = f.stat()
    _bump_a_cost(f)  # same size, other content
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    with billing_audit.open(db) as s:
        r = s.ingest([folder])
    assert r.count("unchanged") == 0 and r.count("ingested") == 2
    after = _totals(db)
    assert after[0] == before[0] and after[1] != before[1]


def test_a_newer_restatement_without_a_manifest_beats_an_older_run_with_one(tmp_path: Path) -> None:
    snaps = FIXTURES / "azure/snapshots/costexports/ea/20261001-20261031/gpu-ea-daily"
    newest = sorted(snaps.iterdir())[-1]
    run = next(newest.iterdir())
    restated = tmp_path / "costexports/ea/20261001-20261031/gpu-ea-daily/202611050300" / "restated"
    restated.mkdir(parents=True)
    for p in run.glob("part_*.csv"):
        shutil.copy(p, restated / p.name)
        _bump_a_cost(restated / p.name)
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        s.ingest([snaps])
        r = s.ingest([restated])
        owner = s.owners()
    assert r.count("superseded") == 0 and r.count("ingested") == 1 and not r.notes
    assert owner["delivery"].to_list() == [str(restated)]
    assert owner["dated_by"].to_list() == ["path"]


def test_the_configs_exports_table_sets_the_overlap_policy(tmp_path: Path) -> None:
    from billing_audit.config import load_config

    cfg = tmp_path / "billing-audit.toml"
    cfg.write_text('[exports]\nprefer = ["sub-actual"]\n', encoding="utf-8")
    assert load_config(cfg).overlap_policy() == OverlapPolicy(keep="larger", prefer=("sub-actual",))
    cfg.write_text('[exports]\nkeep = "both"\n', encoding="utf-8")
    assert load_config(cfg).overlap_policy().keep == "both"
    cfg.write_text('[exports]\nkeep = "all"\n', encoding="utf-8")
    with pytest.raises(Exception, match="keep"):
        load_config(cfg)
