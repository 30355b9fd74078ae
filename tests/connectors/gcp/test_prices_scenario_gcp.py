"""GCP spot savings end to end: the fixture billing exports plus price files -> each spot line's on-demand
equivalent, the jobs' gross savings, net savings and erosion, worked out by hand.

The exports (fixtures/gen_gcp.py) bill spot capacity as its own SKUs, ``cost_at_list`` at the spot price, so the
export alone measures no spot savings.  Spot lines (rule BA001), per job:

- ``llm-pretrain-3`` (USD, us-central1): 3 x 8 h "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in
  Americas" at 8.81104; 3 x 96 h "Spot Preemptible A2 Instance Core running in Americas" at 0.3696; 4170 GiB h
  "Spot Preemptible A2 Instance Ram running in Americas" at 0.6372864.  Spot cost 26.43312 + 1.1088 + 0.6372864
  = 28.1792064.  No overhead is attributed to it.
- ``t5-xxl-ft`` (USD, us-west4): 8 h "Spot Preemptible TPU v5e chip running in Americas" at 2.88; no price list
  has TPUs: never priced.  Overhead: the 0.1728 preemption overhead fee plus the estimates for its one
  interruption, recompute 0.72 and restart idle 0.24 = 1.1328.
- ``detr-large-12`` (EUR, europe-west4): 2 x 8 h H100 at 17.0828 and 2 x 208 h A3 cores at 0.919296: spot 36.004192.
- unattributed EUR (team vision-eu): 1 h "Spot Preemptible Nvidia Tesla A100 GPU running in EMEA" at 1.0248, and
  the team's checkpoint re-reads 0.0184 + 0.9234 = 0.9418; no interruption is counted for it, so they fall in no
  restart window: unlinked checkpoint I/O, not overhead (issue #17).

**Step 0, the bill alone.**  The only line bought on demand at its price is the 1 h on-demand A100 at 2.93872
(the on-demand A2 core lines carry sustained-use, promotion or committed-use credits: no on-demand price).  So
the three A100 spot lines are priced from the bill: 3 x 8 x 2.93872 = 70.52928; cores and RAM unpriced.
llm-pretrain-3: od 70.52928, priced spot 26.43312, gross 44.09616, unpriced 1.1088 + 0.6372864 = 1.7460864.

**Step 1, a pricing export with the A100 and A2 core SKUs only, and the EUR Catalog pages.**  The references win
over the bill: A100 3 x 8 x 2.933908 = 70.413792, cores 3 x 96 x 0.031611 = 9.103968; od 79.51776, priced spot
26.43312 + 1.1088 = 27.54192, gross 51.97584, unpriced (RAM) 0.6372864: partly priced.  t5-xxl-ft: unpriced,
savings and erosion n/a.  USD coverage 27.54192 / (27.54192 + 0.6372864 + 2.88) = 88.68 %.
detr-large-12: H100 2 x 8 x 10.230325 = 163.6852, A3 cores 2 x 208 x 0.0182692 = 7.5999872; od 171.2851872,
gross 135.2809952, no overhead: 0 % eroded.  Unattributed EUR: od 3.4105, gross 2.3857, no overhead (the
0.9418 of re-reads is unlinked), net 2.3857, 0 % eroded.

**Step 2, the whole fixture pricing export** adds the A2 RAM price: 4170 x 0.004237 = 17.66829; llm-pretrain-3 od
97.18605, gross 97.18605 - 28.1792064 = 69.0068436, fully priced.
"""

from __future__ import annotations

import importlib.util
from decimal import Decimal
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import billing_audit
from billing_audit.config import load_config
from billing_audit.report import build_report
from support import FIXTURES

STANDARD = FIXTURES / "gcp" / "standard-ndjson"
RESOURCE = FIXTURES / "gcp" / "resource-parquet"
PRICES = FIXTURES / "prices" / "gcp"
D = Decimal


def _gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_gcp_prices", FIXTURES / "gen_gcp_prices.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _jobs(store: billing_audit.Store) -> dict[tuple[str, str], dict[str, Any]]:
    rep = build_report(store, load_config(None))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for j in rep.jobs.iter_rows(named=True):
        if j["spot_compute_cost"]:
            out[(j["job"], j["currency"])] = j
    return out


def _od(store: billing_audit.Store) -> dict[str, tuple[Any, ...]]:
    rows = store.con.execute("""SELECT l.x_UsageType, o.od_source, sum(o.od_cost), any_value(o.od_unit_price)
        FROM spot_od o JOIN line_items l USING (x_LineItemId) GROUP BY ALL""").fetchall()
    return {r[0]: r[1:] for r in rows}


def _savings(j: dict[str, Any]) -> tuple[Any, ...]:
    return (j["spot_compute_cost"], j["on_demand_equivalent_cost"], j["gross_spot_savings"], j["hidden_overhead_total"],
            j["net_spot_savings"], j["spot_unpriced_cost"])


@pytest.fixture
def store(tmp_path: Path) -> billing_audit.Store:
    s = billing_audit.open(tmp_path / "s.duckdb")
    assert not s.ingest([STANDARD, RESOURCE]).errors
    s.tag()
    yield s
    s.close()


def test_spot_savings_from_the_bill_then_price_references(store: billing_audit.Store, tmp_path: Path) -> None:
    a100 = "Nvidia Tesla A100 GPU attached to Spot Preemptible VMs running in Americas"
    # step 0: the bill's own on-demand A100 prices the A100 spot lines; nothing else is priced
    od = _od(store)
    assert od[a100] == ("bill", D("70.52928"), D("2.93872"))
    assert od["Spot Preemptible A2 Instance Core running in Americas"][:2] == (None, None)
    jobs = _jobs(store)
    assert _savings(jobs[("llm-pretrain-3", "USD")]) == (
        D("28.1792064"), D("70.52928"), D("44.09616"), D(0), D("44.09616"), D("1.7460864"))
    assert _savings(jobs[("detr-large-12", "EUR")])[1:3] == (None, None)  # no on-demand price: n/a, never a loss

    # step 1: a pricing export of the A100 and A2 core SKUs, and the EUR Catalog pages
    gen = _gen()
    partial = tmp_path / "prices" / "cloud_pricing_export-000000000000.json"
    partial.parent.mkdir()
    partial.write_bytes(gen.ndjson([gen.export_row(gen.EXPORT_SKUS[0], 2), gen.export_row(gen.EXPORT_SKUS[1], 2)]))
    rep = store.ingest([partial, PRICES / "catalog"])
    assert not rep.errors and rep.prices is not None and rep.prices.added == 9 + 2 + 7 and rep.prices.repriced
    od = _od(store)
    assert od[a100] == ("reference", D("70.413792"), D("2.933908"))
    assert od["Spot Preemptible A2 Instance Core running in Americas"] == ("reference", D("9.103968"), D("0.031611"))
    assert od["Spot Preemptible A2 Instance Ram running in Americas"][:2] == (None, None)
    assert od["Spot Preemptible TPU v5e chip running in Americas"][:2] == (None, None)
    assert od["Nvidia H100 80GB GPU attached to Spot Preemptible VMs running in EMEA"] == (
        "reference", D("163.6852"), D("10.230325"))
    assert od["Spot Preemptible A3 Instance Core running in EMEA"] == ("reference", D("7.5999872"), D("0.0182692"))
    jobs = _jobs(store)
    # partly priced: the RAM's spot cost is left out of the measured savings
    llm = jobs[("llm-pretrain-3", "USD")]
    assert _savings(llm) == (D("28.1792064"), D("79.51776"), D("51.97584"), D(0), D("51.97584"), D("0.6372864"))
    assert llm["spot_cost_priced"] == D("27.54192") and llm["savings_eroded_pct"] == 0.0
    # not priced at all: savings and erosion n/a, never a loss
    t5 = jobs[("t5-xxl-ft", "USD")]
    assert _savings(t5) == (D("2.88"), None, None, D("1.1328"), None, D("2.88"))
    assert t5["savings_eroded_pct"] is None and t5["recommendation"] == "review"
    detr = jobs[("detr-large-12", "EUR")]
    assert _savings(detr) == (D("36.004192"), D("171.2851872"), D("135.2809952"), D(0), D("135.2809952"), D(0))
    eu = jobs[("(unattributed)", "EUR")]
    assert _savings(eu) == (D("1.0248"), D("3.4105"), D("2.3857"), D(0), D("2.3857"), D(0))
    assert eu["checkpoint_io_unlinked"] == D("0.9418") and eu["savings_eroded_pct"] == 0.0
    rep2 = build_report(store, load_config(None))
    totals = {t["currency"]: t for t in rep2.totals.iter_rows(named=True)}
    assert totals["USD"]["spot_cost_priced"] == D("27.54192")
    assert totals["USD"]["spot_unpriced_cost"] == D("3.5172864")
    assert totals["USD"]["savings_coverage_pct"] == pytest.approx(27.54192 / 31.0592064 * 100)
    assert "savings measured for 89% of USD spot cost; 11% unpriced: run `billing-audit prices pull gcp`" in rep2.warnings
    assert totals["EUR"]["savings_coverage_pct"] == 100.0

    # step 2: the whole fixture pricing export prices the RAM too; the A100 and core references are unchanged
    rep = store.ingest([PRICES / "pricing-export"])
    assert not rep.errors and rep.prices is not None
    assert _od(store)["Spot Preemptible A2 Instance Ram running in Americas"] == (
        "reference", D("17.66829"), D("0.004237"))
    assert _savings(_jobs(store)[("llm-pretrain-3", "USD")]) == (
        D("28.1792064"), D("97.18605"), D("69.0068436"), D(0), D("69.0068436"), D(0))
    # re-ingesting the same price files changes nothing
    again = store.ingest([PRICES])
    assert not again.errors and again.prices is not None and again.prices.added == 0 and again.prices.replaced == 0
