"""Search line items for words, with word families that mean the same across providers.

Every query word must match somewhere in a line's searchable text (description,
usage type, operation, meter, service, resource name), case- and accent-
insensitively, as a substring.  The query is data: words are bound parameters,
never SQL, and no regular expression is built from them.

The search runs over the distinct searchable texts first (descriptions repeat
millions of times; distinct ones are few), then fetches the lines of the texts
that matched.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from billing_audit import registry
from billing_audit.errors import BillingAuditError
from billing_audit.store import PERIOD, Store, frame

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

# Word families (the synonym table; README "search"): a query word that is (a stem of) a member searches
# for every member.  It is applied to the query only: the index holds the bills' own words.  Single-word
# members match a query word by prefix ("interrupt" finds the interruption family); a member with a space
# or hyphen only when the query word is that member ("re-read" or "reread").  Each family is written from the
# words the three providers bill with (fixtures/gen_*.py write the same descriptions).
FAMILIES: list[tuple[str, ...]] = [
    ("interrupt", "interruption", "evict", "eviction", "preempt", "preemption", "preemptible", "reclaim"),
    # GCP bills its restart surcharge as "preemption overhead": it belongs with restart
    ("restart", "recovery", "recover", "relaunch", "resume", "preemption overhead"),
    ("spot", "preemptible", "low priority", "low-priority"),
    # egress: AWS "data transfer out" / "-Out-Bytes" usage types (also "data transfer to <region>"), Azure
    # "Bandwidth - ... Data Transfer Out" and "Inter-Region", GCP "Network Inter Region / Internet Data Transfer Out"
    ("egress", "bandwidth", "data transfer out", "data transfer to", "out-bytes", "inter-region", "inter region",
     "internet data transfer"),
    # re-reads: AWS "GET and all other requests" / "retrieval", Azure "Read Operations" and "All Other
    # Operations" (its GET-class meter), GCP "Class B Operations" and "Data Retrieval"
    ("reread", "re-read", "retrieval", "read operations", "get and all other requests", "requests-tier2",
     "all other operations", "class b operations"),
    # storage: AWS "Simple Storage Service" / "TimedStorage", Azure "Blob" / "Data Stored", GCP "Cloud Storage"
    ("storage", "blob", "bucket", "data stored", "timedstorage"),
]
SEARCH_COLUMNS = ("ChargeDescription", "x_UsageType", "x_Operation", "SkuMeter", "ServiceName", "ResourceName")
MAX_WORDS = 20
MAX_QUERY = 10_000


def normalize(text: str) -> str:
    """Lower-case, accents removed (as DuckDB's strip_accents), whitespace collapsed."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return " ".join("".join(c for c in decomposed if not unicodedata.combining(c)).split())


def expand(query: str, exact: bool = False) -> list[tuple[str, list[str]]]:
    """(word, alternatives) for each query word."""
    if len(query) > MAX_QUERY:
        raise BillingAuditError(f"the query is {len(query):,} characters long; searches take at most {MAX_QUERY:,}")
    words = normalize(query).split()
    if not words:
        raise BillingAuditError("search needs at least one word, e.g. billing-audit search \"spot restart\"")
    if len(words) > MAX_WORDS:
        raise BillingAuditError(f"a search takes at most {MAX_WORDS} words (got {len(words)})")
    out = []
    for w in dict.fromkeys(words):
        alts = [w]
        if not exact and len(w) >= 3:
            for fam in FAMILIES:
                single = [m for m in fam if " " not in m and "-" not in m]  # a phrase only when typed whole
                phrases = {m.replace("-", "").replace(" ", "") for m in fam if m not in single}
                if any(m.startswith(w) or (w.startswith(m) and len(m) >= 4) for m in single) or \
                        w.replace("-", "") in phrases:
                    alts += [m for m in fam if m not in alts]
        out.append((w, alts))
    return out


@dataclass
class SearchResult:
    """What a search found.  Its rows are Arrow tables (``group_rows``, ``line_rows``, ``total_rows``), read as they
    are for JSON; ``groups``, ``lines`` and ``totals`` give them as polars DataFrames (for the table and CSV
    outputs and the Python API): a JSON search, as automation runs it, imports no polars (0.2 s of start-up)."""

    query: str
    terms: list[tuple[str, list[str]]]
    group_rows: pa.Table
    line_rows: pa.Table | None
    total_rows: pa.Table
    filters: dict[str, Any] = field(default_factory=dict)
    group_count: int | None = None  # groups matched in all (``groups`` holds at most ``limit``)
    limit: int | None = None

    @property
    def groups(self) -> pl.DataFrame:
        return frame(self.group_rows)

    @property
    def lines(self) -> pl.DataFrame | None:
        return None if self.line_rows is None else frame(self.line_rows)

    @property
    def totals(self) -> pl.DataFrame:
        return frame(self.total_rows)

    def expanded_terms(self) -> dict[str, list[str]]:
        return {w: alts for w, alts in self.terms}

    def over(self, amount: Decimal) -> list[str]:
        """Currencies whose matched total is above amount."""
        return [r["currency"] for r in self.total_rows.to_pylist() if r["total_cost"] > amount]

    @property
    def line_count(self) -> int:
        """Lines matched in all."""
        return int(sum(int(n) for n in self.total_rows.column("lines").to_pylist()))

    def left_out(self) -> dict[str, int]:
        """How many groups (and, with lines, line items) --limit left out."""
        shown = self.group_rows.num_rows
        out = {"groups": (shown if self.group_count is None else self.group_count) - shown}
        if self.line_rows is not None:
            out["lines"] = self.line_count - self.line_rows.num_rows
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (:mod:`billing_audit.jsonout`): money as exact decimal strings, counts as integers."""
        from billing_audit.jsonout import envelope, money, plain

        group_keys = ["provider", "description", "usage_type", "currency", "lines", "quantity", "total_cost",
                      "first_date", "last_date", "accounts"]
        body: dict[str, Any] = {"query": self.query, "expanded_terms": self.expanded_terms(), "limit": self.limit,
                                "matched": {"groups": self.group_count if self.group_count is not None
                                            else self.group_rows.num_rows, "lines": self.line_count},
                                "left_out": self.left_out()}
        body["groups"] = [{k: int(r[k]) if k == "lines" else money(r[k]) if k == "total_cost" else plain(r[k])
                           for k in group_keys} for r in self.group_rows.to_pylist()]
        if self.line_rows is not None:
            body["lines"] = [{k: money(v) if k == "cost" else plain(v) for k, v in r.items()}
                             for r in self.line_rows.to_pylist()]
        body["totals"] = [{"currency": r["currency"], "total_cost": money(r["total_cost"]), "lines": int(r["lines"])}
                          for r in self.total_rows.to_pylist()]
        return envelope("search", self.filters, **body)


def _norm_sql(prefix: str = "") -> str:
    cols = ", ".join(f"{prefix}{c}" for c in SEARCH_COLUMNS)
    return f"strip_accents(lower(concat_ws(' ', {cols})))"


def condition_sql(n_words: int, norm: str) -> str:
    """Every word matches: word i's alternatives are the bound list $t<i>."""
    return " AND ".join(f"len(list_filter($t{i}, lambda a: contains({norm}, a))) > 0" for i in range(n_words))


def _filters(period: str | None, since: date | None, provider: str | None) -> tuple[str, dict[str, Any]]:
    parts = ["1 = 1"]
    params: dict[str, Any] = {}
    if period:
        parts.append(f"strftime({PERIOD}, '%Y-%m') = $period")
        params["period"] = period
    if since:
        parts.append("ChargePeriodStart >= $since")
        params["since"] = since
    if provider:
        parts.append("x_Provider = $provider")
        params["provider"] = provider
    return " AND ".join(parts), params


def _shown(groups: str) -> str:
    """The SELECT of the groups query ``groups`` with each group's matched alternatives ('<word index>:<alternative>')
    as 'word~alternative' text, comma separated (the query's words bound as ``$ba_words``), and no accounts as an
    empty list."""
    pair = "$ba_words[CAST(split_part(x, ':', 1) AS INTEGER) + 1] || '~' || substr(x, strpos(x, ':') + 1)"
    return (f"SELECT * REPLACE (array_to_string(list_transform(list_filter(matched, lambda x: x IS NOT NULL AND "
            f"x <> ''), lambda x: {pair}), ', ') AS matched, coalesce(accounts, []::VARCHAR[]) AS accounts) "
            f"FROM ({groups})")


def index_sql(lines: str = "line_items") -> list[tuple[str, str]]:
    """The search index (built by `tag` with the line groups): each distinct text once, normalised, with the
    description and usage type a grouped search shows (``search_texts``), and the lines summed per text,
    provider, currency, account, billing period and day (``search_index``): small.  ``lines``: the relation of
    lines indexed (:mod:`billing_audit.incremental` indexes some providers' months)."""
    cols = ", ".join(SEARCH_COLUMNS)
    return [
        ("search_texts", f"""SELECT h, coalesce(ChargeDescription, x_UsageType) AS description,
            x_UsageType AS usage_type, {_norm_sql()} AS norm FROM (
            SELECT hash({cols}) AS h, {", ".join(f"any_value({c}) AS {c}" for c in SEARCH_COLUMNS)}
            FROM {lines} GROUP BY h)"""),
        # grouped by the texts' hash, not by the texts; the description and usage type are two of the texts the
        # hash is of, so they are kept once per text in search_texts rather than on every row here (10M lines:
        # 2.26 -> 1.69 s grouping by the hash, median of five alternating runs; 1M lines, the two tables 0.45 ->
        # 0.31 s without the two texts here, three alternating runs; the same rows)
        ("search_index", f"""SELECT hash({cols}) AS h, x_Provider AS provider,
            coalesce(BillingCurrency, '?') AS currency, SubAccountId AS account, BillingPeriodStart AS bps,
            CAST(ChargePeriodStart AS DATE) AS day, count(*) AS n, sum(ConsumedQuantity) AS quantity,
            sum(BilledCost) AS cost
            FROM {lines} GROUP BY 1, 2, 3, 4, 5, 6"""),
    ]


def _index_current(store: Store) -> bool:
    from billing_audit.rollup import current_groups

    return store._has_table("search_index") and store._has_table("search_texts") and \
        current_groups(store.con) is not None


def _indexed(store: Store, terms: list[tuple[str, list[str]]], params: dict[str, Any], where: str,
             limit: int | None) -> tuple[pa.Table, pa.Table, int]:
    """Groups, totals and the number of groups from the search index: the same answer as from the lines."""
    matched_words = ", ".join(
        f"'{i}:' || list_filter($t{i}, lambda a: contains(norm, a))[1]" for i in range(len(terms)))
    where = (where.replace(f"strftime({PERIOD}", "strftime(" + PERIOD.replace("BillingPeriodStart", "x.bps"))
             .replace("ChargePeriodStart >= $since", "x.day >= CAST($since AS DATE)")
             .replace("x_Provider =", "x.provider ="))
    base = (f"FROM search_index x JOIN (SELECT h, description, usage_type, [{matched_words}] AS matched FROM search_texts "
            f"WHERE {condition_sql(len(terms), 'norm')}) s ON s.h = x.h WHERE {where}")
    lim = f"LIMIT {int(limit)}" if limit else ""
    groups = store.arrow(_shown(
        f"""SELECT x.provider, s.description, s.usage_type, x.currency, CAST(sum(x.n) AS BIGINT) AS lines,
                   coalesce(sum(x.quantity), 0) AS quantity, coalesce(sum(x.cost), 0) AS total_cost,
                   min(x.day) AS first_date, max(x.day) AS last_date,
                   list(DISTINCT x.account ORDER BY x.account) FILTER (WHERE x.account IS NOT NULL) AS accounts,
                   list_sort(list_distinct(flatten(list(s.matched)))) AS matched
            {base} GROUP BY ALL ORDER BY total_cost DESC, provider, description, usage_type, currency {lim}"""),
        {**params, "ba_words": [w for w, _ in terms]})
    totals = store.arrow(f"SELECT x.currency, coalesce(sum(x.cost), 0) AS total_cost, CAST(sum(x.n) AS BIGINT) "
                         f"AS lines {base} GROUP BY 1 ORDER BY 1", params)
    count = store.con.execute(f"SELECT count(*) FROM (SELECT 1 {base} GROUP BY x.provider, s.description, "
                              "s.usage_type, x.currency)", params).fetchone()
    return groups, totals, int(count[0]) if count else 0


def search(
    store: Store,
    query: str,
    *,
    exact: bool = False,
    period: str | None = None,
    since: date | None = None,
    provider: str | None = None,
    limit: int | None = 50,
    lines: bool = False,
) -> SearchResult:
    """Find line items whose text matches every word of the query (see the module doc)."""
    terms = expand(query, exact)
    where, params = _filters(period, since, provider)
    for i, (_, alts) in enumerate(terms):
        params[f"t{i}"] = alts
    filters = {"period": period, "since": since, "provider": provider, "exact": exact, "lines": lines}
    if not lines and _index_current(store):
        groups, totals, count = _indexed(store, terms, params, where, limit)
        return SearchResult(query, terms, groups, None, totals, filters, count, limit)
    cols = ", ".join(SEARCH_COLUMNS)
    cond = condition_sql(len(terms), "norm")
    matched_words = ", ".join(
        f"'{i}:' || list_filter($t{i}, lambda a: contains(norm, a))[1]" for i in range(len(terms))
    )
    store.con.execute(
        # distinct texts by their hash (one integer, not six strings), then the matching lines by that hash
        f"""CREATE OR REPLACE TEMP TABLE ba_search AS
            SELECT h, [{matched_words}] AS matched FROM (
              SELECT h, {_norm_sql()} AS norm FROM (
                SELECT hash({cols}) AS h, {", ".join(f"any_value({c}) AS {c}" for c in SEARCH_COLUMNS)}
                FROM line_items WHERE {where} GROUP BY h))
            WHERE {cond}""",
        params,
    )
    join = f"hash({', '.join('l.' + c for c in SEARCH_COLUMNS)}) = s.h"
    fparams = {k: v for k, v in params.items() if not k.startswith("t")}
    lwhere = where.replace("ChargePeriodStart", "l.ChargePeriodStart").replace("x_Provider =", "l.x_Provider =")
    lwhere = lwhere.replace(f"strftime({PERIOD}", "strftime(" + PERIOD.replace("BillingPeriodStart", "l.BillingPeriodStart"))
    base = f"FROM line_items l JOIN ba_search s ON {join} WHERE {lwhere}"
    lim = f"LIMIT {int(limit)}" if limit else ""
    groups = store.arrow(_shown(
        f"""SELECT l.x_Provider AS provider, coalesce(l.ChargeDescription, l.x_UsageType) AS description,
                   l.x_UsageType AS usage_type, coalesce(l.BillingCurrency, '?') AS currency, count(*) AS lines,
                   coalesce(sum(l.ConsumedQuantity), 0) AS quantity, coalesce(sum(l.BilledCost), 0) AS total_cost,
                   CAST(min(l.ChargePeriodStart) AS DATE) AS first_date, CAST(max(l.ChargePeriodStart) AS DATE) AS last_date,
                   list(DISTINCT l.SubAccountId ORDER BY l.SubAccountId) FILTER (WHERE l.SubAccountId IS NOT NULL) AS accounts,
                   list_sort(list_distinct(flatten(list(s.matched)))) AS matched
            {base} GROUP BY ALL ORDER BY total_cost DESC, provider, description, usage_type, currency {lim}"""),
        {**fparams, "ba_words": [w for w, _ in terms]},
    )
    line_rows = None
    if lines:
        line_rows = store.arrow(
            f"""SELECT l.x_LineItemId, l.x_Provider AS provider, CAST(l.ChargePeriodStart AS DATE) AS date,
                       coalesce(l.ChargeDescription, l.x_UsageType) AS description, l.x_UsageType AS usage_type,
                       l.ConsumedQuantity AS quantity, l.BilledCost AS cost, l.BillingCurrency AS currency,
                       l.SubAccountId AS account, l.ResourceId AS resource, l.x_SourceFile AS source_file,
                       l.x_SourceRow AS source_row
                {base} ORDER BY l.BilledCost DESC, l.x_LineItemId {lim}""",
            fparams,
        )
    totals = store.arrow(
        f"""SELECT coalesce(l.BillingCurrency, '?') AS currency, coalesce(sum(l.BilledCost), 0) AS total_cost,
                   count(*) AS lines {base} GROUP BY 1 ORDER BY 1""",
        fparams,
    )
    counted = store.con.execute(
        f"""SELECT count(*) FROM (SELECT 1 {base} GROUP BY l.x_Provider, coalesce(l.ChargeDescription, l.x_UsageType),
            l.x_UsageType, coalesce(l.BillingCurrency, '?'))""", fparams).fetchone()
    return SearchResult(query, terms, groups, line_rows, totals, filters, int(counted[0]) if counted else 0, limit)


RULE_TEMPLATE = """/*
id: {id}
name: {name}
title: {title}
category: {category}
severity: {severity}
providers: [{providers}]
params:
{params}description: |
  Written by `billing-audit search {query_yaml}{flags}`: tags exactly the lines that
  search found.  Each word's alternatives are a parameter; every word must match
  (case- and accent-insensitive substring) in the description, usage type,
  operation, meter, service or resource name.
*/
select
  x_LineItemId,
  {reason} || coalesce(ChargeDescription, x_UsageType, '') as reason
from line_items
where {where}
"""


def _yaml_str(text: str) -> str:
    """A YAML double-quoted string that cannot close the header's block comment."""
    import json

    return json.dumps(text).replace("*/", "*\\u002f")


def rule_text(result: SearchResult, rule_id: str, category: str = "custom", severity: str = "medium") -> str:
    """A rule file (the rule engine's format) that tags exactly the lines this search found.

    The words are parameters of the rule (their alternatives are the defaults): no
    text the user typed becomes SQL.
    """
    words = " ".join(w for w, _ in result.terms)
    params = [f"  label: {{default: {_yaml_str(words)}, description: the search that wrote this rule}}\n"]
    for i, (w, alts) in enumerate(result.terms):
        alts_yaml = "[" + ", ".join(_yaml_str(a) for a in alts) + "]"
        params.append(f"  term_{i + 1}: {{default: {alts_yaml}, description: {_yaml_str('alternatives for ' + w)}}}\n")
    norm = _norm_sql()
    conds = [f"len(list_filter($term_{i + 1}, lambda a: contains({norm}, a))) > 0" for i in range(len(result.terms))]
    f = result.filters
    if f.get("provider"):
        params.append(f"  provider: {{default: {_yaml_str(f['provider'])}, description: only this provider}}\n")
        conds.append("x_Provider = $provider")
    if f.get("period"):
        params.append(f"  period: {{default: {_yaml_str(f['period'])}, description: billing month YYYY-MM}}\n")
        conds.append(f"strftime({PERIOD}, '%Y-%m') = $period")
    if f.get("since"):
        params.append(f"  since: {{default: {_yaml_str(f['since'].isoformat())}, description: first usage date}}\n")
        conds.append("ChargePeriodStart >= CAST($since AS DATE)")
    providers = [f["provider"]] if f.get("provider") else list(registry.providers())
    slug = "_".join("".join(c for c in w if c.isascii() and c.isalnum()) for w, _ in result.terms).strip("_")
    return RULE_TEMPLATE.format(
        id=rule_id,
        name=f"{category}.search_{slug[:40].strip('_') or 'terms'}",
        title=_yaml_str(f"Lines matching the search {words[:150]}"),
        category=category,
        severity=severity,
        providers=", ".join(providers),
        params="".join(params),
        query_yaml=_yaml_str(words[:200]).replace("\\n", " "),
        flags=" --exact" if f.get("exact") else "",
        reason="'search \"' || $label || '\": '",
        where="\n  and ".join(conds),
    )
