"""`explain LINE_ID`: where the report puts a line (job and team and what gave them, in rollup's attribution
order), the category that counts it, and for a checkpoint re-read or egress line the restart window that makes it
interruption overhead (or that it is unlinked checkpoint I/O); the same in ``--format json``; and the README's own
example on a store built as ``make demo`` builds demo.duckdb.

The attribution export (written here with the AWS connector's CUR generator), December 2026, one payer, hourly:

- row 1: i-own, tags training_job=own, team=vision (the line's own tag);
- rows 2-4: i-maj, rows 2 and 3 tagged training_job=maj, team=nlp, row 4 untagged (the resource's majority:
  2 of its 3 lines);
- row 5: ckpt-mapped-7, untagged: the resource map's row 2 (ckpt-mapped-*: job mapjob, team mapteam) decides,
  row 1 (other-*) does not match;
- row 6: vol-acct, untagged, sub-account 111122223333, which account_teams maps to Finance: no job, team finance;
- row 7: vol-none, untagged, sub-account 999900001111: neither job nor team.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
from collections import Counter, defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import Config, load_config
from billing_audit.report import build_report
from connectors.aws.synthetic import cur_csv, cur_line
from support import FIXTURES, ROOT

DEC = datetime(2026, 12, 1)
WINDOWS_CSV = FIXTURES / "scenarios-windows" / "aws-cur-csv" / "20261201-20270101" / "windows-cur-1.csv"


def _row(hour: int, resource: str, account: str = "444455557777", **tags: str) -> dict[str, object]:
    return cur_line(DEC + timedelta(hours=hour), **{
        "identity_line_item_id": f"attr{hour:03d}", "bill_billing_entity": "AWS", "bill_bill_type": "Anniversary",
        "bill_payer_account_id": "444455556666", "bill_billing_period_start_date": DEC,
        "bill_billing_period_end_date": datetime(2027, 1, 1), "line_item_usage_account_id": account,
        "line_item_line_item_type": "Usage", "line_item_product_code": "AmazonEC2",
        "line_item_usage_type": "USE1-BoxUsage:m5.large", "line_item_operation": "RunInstances",
        "line_item_resource_id": resource, "line_item_usage_amount": 1.0, "line_item_currency_code": "USD",
        "line_item_unblended_cost": 1.0, "line_item_line_item_description": "$1.00 per On Demand Linux m5.large",
        "pricing_unit": "Hrs", **{f"resource_tags_user_{k}": v for k, v in tags.items()}})


@pytest.fixture(scope="module")
def attributed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[int, str]]:
    """(store, config, line id by source row) of the attribution export above."""
    root = tmp_path_factory.mktemp("explain")
    folder = root / "cur" / "attr" / "20261201-20270101"
    folder.mkdir(parents=True)
    rows = [_row(0, "i-own", training_job="own", team="vision"),
            _row(1, "i-maj", training_job="maj", team="nlp"), _row(2, "i-maj", training_job="maj", team="nlp"),
            _row(3, "i-maj"), _row(4, "ckpt-mapped-7"), _row(5, "vol-acct", "111122223333"),
            _row(6, "vol-none", "999900001111")]
    (folder / "attr-1.csv").write_bytes(cur_csv(rows))
    (root / "map.csv").write_text("resource,job,team\nother-*,otherjob,otherteam\nckpt-mapped-*,MapJob,MapTeam\n")
    cfg = root / "billing-audit.toml"
    cfg.write_text('[attribution]\nresource_map = "map.csv"\naccount_teams = { "111122223333" = "Finance" }\n')
    db = root / "a.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([root / "cur"]).errors
        s.tag()
        ids = {int(r): i for i, r in s.sql("SELECT x_LineItemId, x_SourceRow FROM line_items").iter_rows()}
    assert len(ids) == 7
    return db, cfg, ids


def _json(*args: str) -> dict:
    r = CliRunner().invoke(main, ["explain", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _text(*args: str) -> str:
    r = CliRunner().invoke(main, ["explain", *args])
    assert r.exit_code == 0, r.output
    return r.output


def test_job_and_team_from_the_lines_own_tags(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    db, cfg, ids = attributed
    a = _json(ids[1], "--db", str(db), "--config", str(cfg))["attribution"]
    assert (a["job"], a["team"]) == ("own", "vision")
    assert a["job_from"] == {"source": "tag", "key": "training_job", "value": "own"}
    assert a["team_from"] == {"source": "job_majority", "job": "own", "value": "vision", "lines": 1, "of": 1}
    out = _text(ids[1], "--db", str(db), "--config", str(cfg))
    assert "job                own in 2026-12, from the line's own tag training_job=own" in out
    assert "team               vision, from the team most lines of job own carry (1 of 1 lines)" in out


def test_job_from_the_resources_majority_tag(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    db, cfg, ids = attributed
    a = _json(ids[4], "--db", str(db), "--config", str(cfg))["attribution"]
    assert (a["job"], a["team"]) == ("maj", "nlp")
    assert a["job_from"] == {"source": "resource_majority", "resource": "i-maj", "value": "maj", "lines": 2, "of": 3}
    # the untagged line's own team is the resource's majority too, so all 3 of maj's lines say nlp
    assert a["team_from"] == {"source": "job_majority", "job": "maj", "value": "nlp", "lines": 3, "of": 3}
    assert "the job tag most lines of resource i-maj carry (2 of 3 lines)" in _text(
        ids[4], "--db", str(db), "--config", str(cfg))


def test_job_from_the_first_matching_resource_map_row(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    db, cfg, ids = attributed
    a = _json(ids[5], "--db", str(db), "--config", str(cfg))["attribution"]
    assert (a["job"], a["team"]) == ("mapjob", "mapteam")
    assert a["job_from"] == {"source": "resource_map", "file": "map.csv", "row": 2, "pattern": "ckpt-mapped-*",
                             "value": "mapjob"}
    assert "resource-map row 2 (ckpt-mapped-*) of map.csv" in _text(ids[5], "--db", str(db), "--config", str(cfg))
    # without the config, the same line is attributed to nothing, and says what was tried
    a = _json(ids[5], "--db", str(db))["attribution"]
    assert (a["job"], a["team"]) == ("(unattributed)", "(unattributed)")
    assert a["job_from"]["source"] is None
    assert "no resource map (attribution.resource_map)" in a["job_from"]["tried"]


def test_team_from_the_account_map_and_no_job(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    db, cfg, ids = attributed
    a = _json(ids[6], "--db", str(db), "--config", str(cfg))["attribution"]
    assert (a["job"], a["team"]) == ("(unattributed)", "finance")
    assert a["team_from"] == {"source": "account_teams", "account": "111122223333", "column": "SubAccountId",
                              "value": "finance"}
    assert a["job_from"]["tried"] == ["no job tag (training-job, training_job, job, job-id, job_id)",
                                      "no Kubernetes job label (training.kubeflow.org/job-name, ray.io/cluster, "
                                      "volcano.sh/job-name, jobset.sigs.k8s.io/jobset-name, "
                                      "batch.kubernetes.io/job-name, job-name)",
                                      "no line of resource vol-acct carries one",
                                      "no resource-map row matches vol-acct (2 rows)"]


def test_unattributed_says_what_was_tried(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    db, cfg, ids = attributed
    a = _json(ids[7], "--db", str(db), "--config", str(cfg))["attribution"]
    assert (a["job"], a["team"]) == ("(unattributed)", "(unattributed)")
    assert a["team_from"]["source"] is None
    assert a["team_from"]["tried"][-2:] == ["sub-account 999900001111 is not in account_teams",
                                            "billing account 444455556666 is not in account_teams"]
    out = _text(ids[7], "--db", str(db), "--config", str(cfg))
    assert "job                (unattributed) in 2026-12, from nothing: tried no job tag" in out


def test_every_line_goes_where_the_report_counts_it(attributed: tuple[Path, Path, dict[int, str]]) -> None:
    """explain's job and team of each line, counted, are the report's rows and their line counts."""
    db, cfg, ids = attributed
    got = Counter()
    for i in ids.values():
        a = _json(i, "--db", str(db), "--config", str(cfg))["attribution"]
        got[(a["job"], a["team"])] += 1
    with billing_audit.open(db, read_only=True) as s:
        rep = build_report(s, load_config(cfg))
    want = Counter({(r["job"], r["team"]): r["lines"] for r in rep.jobs.iter_rows(named=True)})
    assert got == want
    assert got == Counter({("own", "vision"): 1, ("maj", "nlp"): 3, ("mapjob", "mapteam"): 1,
                           ("(unattributed)", "finance"): 1, ("(unattributed)", "(unattributed)"): 1})


@pytest.fixture(scope="module")
def windows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The restart-window scenario (tests/core/test_report_windows.py): eps restarts at hour 3 (a fee line), its
    window holds hours 3-6; its checkpoint GETs are 0.50 at hour 3 (row 13) and 0.90 at hour 7 (row 16)."""
    db = tmp_path_factory.mktemp("win") / "w.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES / "scenarios-windows"]).errors
        s.tag()
    fp = hashlib.sha256(WINDOWS_CSV.read_bytes()).hexdigest()[:12]
    return db, f"aws-{fp}"


def test_a_reread_inside_a_restart_window(windows: tuple[Path, str]) -> None:
    db, prefix = windows
    doc = _json(f"{prefix}-13", "--db", str(db))
    assert doc["category"] == "storage_reread"
    assert (doc["attribution"]["job"], doc["attribution"]["team"]) == ("eps", "vision")
    w = doc["window"]
    assert (w["linked"], w["counted_as"], w["periods"], w["source"]) == (True, "storage_reread_cost", 3, "fee_lines")
    assert w["interruptions"] == [{"start": "2026-12-01T03:00:00", "end": "2026-12-01T04:00:00",
                                   "source": "fee_lines", "previous_period": False}]
    out = _text(f"{prefix}-13", "--db", str(db))
    assert "category           storage_reread (the first in precedence order among its hits)" in out
    assert ("restart window     yes: interruption overhead (storage_reread_cost); the window (3 periods after the "
            "interruption's) opened by the interruption at 2026-12-01 03:00 (fee_lines)") in out


def test_a_reread_outside_every_restart_window(windows: tuple[Path, str]) -> None:
    db, prefix = windows
    w = _json(f"{prefix}-16", "--db", str(db))["window"]
    assert (w["linked"], w["counted_as"], w["interruptions"]) == (False, "checkpoint_io_unlinked", [])
    assert w["reason"].startswith("unlinked checkpoint I/O: no interruption of eps (vision, aws, USD")
    assert "restart window     no: unlinked checkpoint I/O" in _text(f"{prefix}-16", "--db", str(db))


def test_json_keys_and_types(windows: tuple[Path, str]) -> None:
    db, prefix = windows
    doc = _json(f"{prefix}-13", "--db", str(db))
    assert {"schema_version", "kind", "generated_at", "filters", "line", "hits", "on_demand", "attribution",
            "category", "window"} <= set(doc)
    a, w = doc["attribution"], doc["window"]
    assert all(isinstance(a[k], str) for k in ("job", "team", "period", "provider", "currency"))
    assert isinstance(a["job_from"], dict) and isinstance(a["team_from"], dict)
    assert isinstance(a["team_from"]["lines"], int) and isinstance(a["team_from"]["of"], int)
    assert isinstance(doc["category"], str)
    assert isinstance(w["linked"], bool) and isinstance(w["periods"], int) and isinstance(w["interruptions"], list)
    assert all(isinstance(i["start"], str) and isinstance(i["end"], str) for i in w["interruptions"])
    # a fee line is no checkpoint line: no window; its category still says what counts it
    fee = _json(f"{prefix}-11", "--db", str(db))
    assert (fee["category"], fee["window"]) == ("restart_fee", None)
    assert "restart_fee (the first in precedence order among its hits); billed interruption overhead (restart_fees)" \
        in _text(f"{prefix}-11", "--db", str(db))


def test_the_windows_fixture_and_its_line_ids_are_stable() -> None:
    """Line ids are <provider>-<sha256 of the file, 12 hex>-<row>: the committed file is exactly what its
    generator writes, so the README's id survives a regeneration."""
    spec = importlib.util.spec_from_file_location("gen_scenarios", FIXTURES / "gen_scenarios.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.cur_csv(gen.windows_aws_rows()) == WINDOWS_CSV.read_bytes()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store built as `make demo` builds demo.duckdb."""
    make = (ROOT / "Makefile").read_text()
    assert "billing-audit audit fixtures/ --db demo.duckdb --out demo-report" in make
    tmp = tmp_path_factory.mktemp("demo")
    db = tmp / "demo.duckdb"
    r = CliRunner().invoke(main, ["audit", str(FIXTURES), "--db", str(db), "--out", str(tmp / "demo-report")])
    assert r.exit_code == 0, r.output
    return db


def test_the_readmes_explain_example_on_the_demo_store(demo: Path) -> None:
    """The README's `explain` command lines, run on a store built as `make demo` builds demo.duckdb."""
    readme = (ROOT / "README.md").read_text()
    examples = re.findall(r"^billing-audit (explain [^#\n]*?--db demo\.duckdb[^#\n]*?)\s*(?:#.*)?$", readme, re.M)
    assert len(examples) >= 2, examples
    db = demo
    outputs = {}
    for ex in examples:
        args = [str(db) if a == "demo.duckdb" else a for a in shlex.split(ex)]
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, (ex, r.output)
        outputs[ex] = r.output
    text = outputs["explain aws-96bc1426b7e8-13 --db demo.duckdb"]
    assert "job                eps in 2026-12, from the line's own tag training_job=eps" in text
    assert "restart window     yes: interruption overhead (storage_reread_cost)" in text
    assert f"aws-{hashlib.sha256(WINDOWS_CSV.read_bytes()).hexdigest()[:12]}-13" == "aws-96bc1426b7e8-13"
    # the price section's spot line (fixtures/aws/cur-2018-csv): priced from the price reference the fixtures hold
    spot = outputs["explain aws-3d209bdb4f73-1 --db demo.duckdb"]
    assert "on-demand equivalent: 24.4800 USD from reference" in spot
    assert "category           spot_compute (the first in precedence order among its hits)" in spot
    doc = json.loads(outputs["explain aws-96bc1426b7e8-13 --db demo.duckdb --format json"])
    assert (doc["attribution"]["job"], doc["category"], doc["window"]["linked"]) == ("eps", "storage_reread", True)


def test_an_untagged_store_says_the_attribution_needs_a_tag_run(tmp_path: Path) -> None:
    db = tmp_path / "u.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES / "scenarios-windows"]).errors
    line = f"aws-{hashlib.sha256(WINDOWS_CSV.read_bytes()).hexdigest()[:12]}-13"
    doc = _json(line, "--db", str(db))
    assert doc["attribution"] == {"job": None, "team": None,
                                  "reason": "no completed tag run of the lines in the store: run `billing-audit tag`"}
    assert (doc["category"], doc["window"]) == (None, None)
    out = _text(line, "--db", str(db))
    assert "attribution: n/a (no completed tag run of the lines in the store: run `billing-audit tag`)" in out
    assert "no rule matched this line (run `billing-audit tag` after ingesting)" in out


def test_the_notebook_store_explains_as_the_cli(windows: tuple[Path, str]) -> None:
    db, prefix = windows
    with billing_audit.open(db, read_only=True) as s:
        found = s.explain(f"{prefix}-13")
    line, hits = found
    assert line["x_LineItemId"] == f"{prefix}-13" and [h["category"] for h in hits] == ["storage_reread"]
    assert (found.attribution or {})["job"] == "eps" and found.category == "storage_reread"
    assert found.window is not None and found.window["linked"] is True


def test_every_checkpoint_line_of_the_demo_store_ties_to_the_report(demo: Path) -> None:
    """Each re-read and egress line's effective cost, summed by explain's job row and counted_as (linked re-read,
    linked egress, or unlinked checkpoint I/O), is exactly the report's column of that row (every period summed)."""
    got: dict[tuple[str, ...], Decimal] = defaultdict(Decimal)
    with billing_audit.open(demo, read_only=True) as s:
        ids = [r[0] for r in s.sql("SELECT x_LineItemId FROM line_categories "
                                   "WHERE category IN ('storage_reread', 'checkpoint_egress')").iter_rows()]
        linked = 0
        for i in ids:
            x = s.explain(i)
            assert x.attribution is not None and x.window is not None
            a = x.attribution
            got[(a["job"], a["team"], a["provider"], a["currency"], x.window["counted_as"])] += x.line["EffectiveCost"]
            linked += x.window["linked"]
        rep = build_report(s, Config())
    assert len(ids) > 50 and 0 < linked < len(ids)
    cols = ("storage_reread_cost", "checkpoint_egress_cost", "checkpoint_io_unlinked")
    for r in rep.jobs.iter_rows(named=True):
        for c in cols:
            assert got.pop((r["job"], r["team"], r["provider"], r["currency"], c), Decimal(0)) == r[c], (r["job"], c)
    assert not got


def test_a_window_opened_by_inferred_churn_names_the_resources_stop() -> None:
    """An inferred interruption has no charge period of its own, only the stop of the churned resource (ts NULL)."""
    from billing_audit.cli.explain_cmd import placement_text

    window = {"linked": True, "counted_as": "checkpoint_egress_cost", "periods": 3, "source": "inferred",
              "interruptions": [{"start": None, "end": datetime(2026, 11, 1, 23), "source": "inferred"}]}
    out = placement_text(None, "checkpoint_egress", window)
    assert out[-1] == ("  restart window     yes: interruption overhead (checkpoint_egress_cost); the window (3 periods "
                       "after the interruption's) opened by the interruption at the stop of a churned spot resource "
                       "at 2026-11-01 23:00 (inferred)")
