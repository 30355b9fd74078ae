"""The core loads no connector part it does not need: no cloud SDK, no generator, on import or ingest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = next(q for q in Path(__file__).resolve().parents if (q / 'pyproject.toml').is_file())
FOCUS_FILE = next((ROOT / "fixtures" / "focus" / "azure-focus-1.2").rglob("part_0_0001.csv"))

PROBE = """
import json, sys
{body}
heavy = ("boto3", "botocore", "azure", "google", "pyspark")
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in heavy or m == "connectors.synthetic" or m.endswith(".synthetic")
                        or m.endswith(".pull") or m.endswith(".athena") or m.endswith(".bigquery")
                        or m == "connectors.spark.engine" or m == "billing_audit.generate")))
"""


def _loaded(body: str, tmp_path: Path) -> list[str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(body=body)], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    loaded: list[str] = json.loads(r.stdout.strip().splitlines()[-1])
    return loaded


def test_import_loads_no_sdk_nor_generator(tmp_path: Path) -> None:
    assert _loaded("import billing_audit", tmp_path) == []


def test_library_ingest_of_a_focus_file_loads_no_sdk_nor_generator(tmp_path: Path) -> None:
    body = (f"import billing_audit\nwith billing_audit.open({str(tmp_path / 'a.duckdb')!r}) as s:\n"
            f"    assert s.ingest([{str(FOCUS_FILE)!r}]).rows > 0")
    assert _loaded(body, tmp_path) == []


def test_cli_ingest_of_a_focus_file_loads_no_sdk_nor_generator(tmp_path: Path) -> None:
    body = ("from billing_audit.cli import main\n"
            f"main(['ingest', {str(FOCUS_FILE)!r}, '--db', {str(tmp_path / 'c.duckdb')!r}, '-q'], standalone_mode=False)")
    assert _loaded(body, tmp_path) == []


def test_generate_loads_only_its_own_provider(tmp_path: Path) -> None:
    body = f"from billing_audit.generate import generate\ngenerate('gcp', 50, {str(tmp_path / 'g')!r})"
    assert _loaded(body, tmp_path) == ["billing_audit.generate", "connectors.gcp.synthetic", "connectors.synthetic"]


def test_registry_knows_every_connector_and_says_did_you_mean() -> None:
    import pytest

    from billing_audit import registry
    from billing_audit.errors import BillingAuditError

    assert registry.names() == ("aws", "azure", "focus", "gcp", "spark")
    assert registry.with_part("synthetic") == ("aws", "azure", "gcp")
    assert registry.with_part("pull") == ("aws", "azure", "gcp")
    with pytest.raises(BillingAuditError, match="did you mean 'azure'"):
        registry.connector("azrue")


def test_one_module_owns_the_stores_tables() -> None:
    """Every table and view the store keeps is declared in billing_audit/ddl.py (line_items by schema.py)."""
    import re

    pattern = re.compile(r"CREATE (?:OR REPLACE )?(?:TABLE|VIEW)(?! AS)\b(?!.*\bTEMP\b)", re.IGNORECASE)
    offenders = []
    for path in sorted((ROOT / "billing_audit").rglob("*.py")):
        if path.name in ("ddl.py", "schema.py", "rulebox.py"):  # rulebox: a scratch database of its own
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "IF NOT EXISTS" in line and pattern.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert offenders == []
    from billing_audit import ddl

    names = " ".join([ddl.LINE_ITEMS, *ddl.BOOKKEEPING, *ddl.RULE_TABLES, ddl.LINE_CATEGORY_VIEW, ddl.RESULT_TABLES,
                      *ddl.PRICE_TABLES])
    for table in ("line_items", "deliveries", "slices", "file_stats", "ingest_log", "rule_hits", "tag_runs",
                  "line_categories", "engine_runs", "engine_results", "price_references", "spot_od", "tag_slices",
                  "spot_bill"):
        assert re.search(rf"\b{table}\b", names), table
