"""SQL rule files: loading, validation and the safety checks rules pass before they run.

A rule is one ``.sql`` file: a YAML header in a leading block comment, then one
read-only SELECT over ``line_items`` (and the documented views) returning
``x_LineItemId`` and a human ``reason``.  Rules are untrusted input: see
:func:`check_sql`.  Running rules lives in :mod:`billing_audit.tagging`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from billing_audit.categories import CATEGORIES
from billing_audit.errors import BillingAuditError
from billing_audit.registry import providers

SEVERITIES: tuple[str, ...] = ("info", "low", "medium", "high", "critical")

MAX_RULE_BYTES = 256 * 1024

# Relations a rule may read besides its own CTEs.
READABLE = {"line_items", "checkpoint_resources"}

# Functions that reach outside the rule's rows: files, the environment, the session's settings, variables and
# query text, the catalog, secrets, the log, or SQL run from a string.  The rule's connection refuses file access
# and sees only line_items and checkpoint_resources anyway; refusing by name says why, earlier.
FORBIDDEN_FUNCTIONS = re.compile(
    r"^(read_\w+|parquet_\w+|sniff_csv|glob|query|query_table|getenv|iceberg_\w+|delta_scan|"
    r"sqlite_\w+|postgres_\w+|mysql_\w+|duckdb_\w+|pragma_\w+|load_\w+|install_\w+|\w*_scan|system|"
    r"current_setting|getvariable|current_query|current_database|current_catalog|current_schemas?|in_search_path|"
    r"which_secret|json_execute_serialized_sql|write_log|\w*_logging|truncate_duckdb_logs|checkpoint|force_checkpoint|"
    r"enable_\w+|disable_\w+|\w*_grammar_extension|sql_auto_complete|test_all_types|summary)$",
    re.IGNORECASE,
)

# The built-in rules (*.sql) and their case files (*.cases.yaml): the wheel ships
# the checkout's rules/ as billing_audit/_rules (pyproject force-include).
BUILTIN_DIR_CANDIDATES = (
    Path(__file__).resolve().parent / "_rules",  # installed wheel
    Path(__file__).resolve().parent.parent / "rules",  # source checkout (and editable installs)
)


class RuleError(BillingAuditError):
    """A rule that cannot be loaded or is refused; says file:line and why."""

    def __init__(self, file: Path | str, line: int | None, reason: str):
        self.file = str(file)
        self.line = line
        self.reason = reason
        where = f"{file}:{line}" if line else str(file)
        super().__init__(f"{where}: {reason}")


class Param(BaseModel):
    model_config = ConfigDict(extra="forbid")
    default: Any = None
    description: str = ""


class RuleMeta(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[A-Z]{2,5}[0-9]{3,4}$")
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
    title: str
    category: str
    severity: str
    providers: list[str] = Field(min_length=1)
    description: str = ""
    params: dict[str, Param] = Field(default_factory=dict)

    @field_validator("category")
    @classmethod
    def _known_category(cls, v: str) -> str:
        if v not in CATEGORIES:
            raise ValueError("unknown category")
        return v

    @field_validator("severity")
    @classmethod
    def _known_severity(cls, v: str) -> str:
        if v not in SEVERITIES:
            raise ValueError("unknown severity")
        return v

    @field_validator("providers")
    @classmethod
    def _known_providers(cls, v: list[str]) -> list[str]:
        if any(p not in providers() for p in v):
            raise ValueError("unknown provider")
        return v


@dataclass
class Rule:
    meta: RuleMeta
    path: Path
    sql: str
    sql_line: int  # file line where the query starts
    builtin: bool = False
    tree: exp.Expr | None = field(default=None, repr=False)

    @property
    def id(self) -> str:
        return self.meta.id

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def category(self) -> str:
        return self.meta.category

    def defaults(self) -> dict[str, Any]:
        return {k: p.default for k, p in self.meta.params.items()}


_HEADER = re.compile(r"\A\s*/\*(?P<yaml>.*?)\*/", re.DOTALL)


def _line_of_key(text: str, key: str, start_line: int) -> int:
    for i, line in enumerate(text.splitlines()):
        if re.match(rf"^\s*{re.escape(key)}\s*:", line):
            return start_line + i
    return start_line


MAX_PARAM_SIZE = 10_000  # characters and list items a parameter's default may hold, counted through nesting
MAX_PARAM_DEPTH = 4


class _AliasRefused(Exception):
    def __init__(self, line: int, reason: str):
        self.line = line
        self.reason = reason


class _HeaderLoader(yaml.SafeLoader):  # type: ignore[misc]  # (yaml is untyped here)
    """YAML for rule headers: no anchors, no aliases (a 600-byte alias bomb expands to gigabytes)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            kind = "aliases (*name)" if isinstance(event, yaml.AliasEvent) else "anchors (&name)"
            raise _AliasRefused(event.start_mark.line, f"YAML {kind} are not allowed in a rule header")
        return super().compose_node(parent, index)


def _value_size(value: Any, depth: int = 0) -> int:
    """How big a parameter value is: characters of its scalars plus items of its lists and mappings."""
    if depth > MAX_PARAM_DEPTH:
        return MAX_PARAM_SIZE + 1
    if isinstance(value, (list, tuple)):
        return len(value) + sum(_value_size(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) + sum(_value_size(k, depth + 1) + _value_size(v, depth + 1) for k, v in value.items())
    return len(str(value)) if value is not None else 0


def parse_rule_file(path: Path, *, builtin: bool = False) -> Rule:
    """Read and validate one rule file (header and SQL safety); raises RuleError."""
    try:
        if path.stat().st_size > MAX_RULE_BYTES:
            raise RuleError(path, None, f"rule file is larger than {MAX_RULE_BYTES // 1024} KiB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RuleError(path, None, f"cannot read rule file: {e}") from None
    m = _HEADER.match(text)
    if not m:
        raise RuleError(path, 1, "a rule file starts with a /* ... */ block holding its YAML header")
    header_line = text[: m.start("yaml")].count("\n") + 1
    try:
        raw = yaml.load(m.group("yaml"), Loader=_HeaderLoader)  # noqa: S506 (a SafeLoader that refuses aliases)
    except _AliasRefused as e:
        raise RuleError(path, header_line + e.line, e.reason) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = header_line + mark.line if mark is not None else header_line
        raise RuleError(path, line, f"header is not valid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(raw, dict):
        raise RuleError(path, header_line, "header must be a YAML mapping (id, name, title, ...)")
    try:
        meta = RuleMeta.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        key = loc[0] if loc else "?"
        line = _line_of_key(m.group("yaml"), loc[-1] if err["type"] == "extra_forbidden" else key, header_line)
        if err["type"] == "extra_forbidden":
            allowed = ", ".join(RuleMeta.model_fields) if len(loc) == 1 else "default, description"
            reason = f"unknown key {loc[-1]!r} in header (allowed: {allowed})"
        elif key == "category":
            reason = f"unknown category {raw.get('category')!r}; categories: {', '.join(CATEGORIES)}"
        elif key == "severity":
            reason = f"unknown severity {raw.get('severity')!r}; severities: {', '.join(SEVERITIES)}"
        elif key == "providers":
            reason = f"providers must be a list drawn from {', '.join(providers())}"
        else:
            reason = f"header key {'.'.join(loc)!r}: {err['msg']}"
        raise RuleError(path, line, reason) from None
    for name, p in meta.params.items():
        size = _value_size(p.default)
        if size > MAX_PARAM_SIZE:
            raise RuleError(path, _line_of_key(m.group("yaml"), name, header_line),
                            f"parameter {name!r}: its default is too large ({size:,} values or characters; "
                            f"at most {MAX_PARAM_SIZE:,})")
    if not path.name.startswith(meta.id):
        raise RuleError(path, _line_of_key(m.group("yaml"), "id", header_line),
                        f"file name must start with the rule id {meta.id!r} (e.g. {meta.id}_{meta.name.replace('.', '_')}.sql)")
    sql = text[m.end():]
    sql_line = text[: m.end()].count("\n") + 1 + sql[: len(sql) - len(sql.lstrip())].count("\n")
    rule = Rule(meta=meta, path=path, sql=sql.strip().rstrip(";").strip(), sql_line=sql_line, builtin=builtin)
    rule.tree = check_sql(rule)
    return rule


def check_sql(rule: Rule) -> exp.Expr:
    """Refuse anything but one read-only SELECT over the readable relations."""
    path, line = rule.path, rule.sql_line
    if not rule.sql:
        raise RuleError(path, line, "no query after the header")
    try:
        statements = [s for s in sqlglot.parse(rule.sql, read="duckdb") if s is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        at = line + (first.get("line") or 1) - 1
        raise RuleError(path, at, f"SQL syntax error: {first.get('description') or e}") from None
    if len(statements) != 1:
        raise RuleError(path, line, f"a rule holds exactly one SELECT statement (found {len(statements)})")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        kind = type(tree).__name__.upper()
        raise RuleError(path, line, f"only a read-only SELECT is allowed, not {kind}")
    cte_refs = _cte_references(rule, tree)
    for node in tree.walk():
        if isinstance(node, (exp.DDL, exp.DML, exp.Command, exp.Pragma, exp.Set, exp.Copy, exp.Attach, exp.Install)):
            raise RuleError(path, line, f"only a read-only SELECT is allowed, not {type(node).__name__.upper()}")
        if isinstance(node, exp.Table):
            target = node.this
            if not isinstance(target, exp.Identifier):
                fname = (target.sql(dialect="duckdb").split("(")[0] if target is not None else "?").lower()
                raise RuleError(path, _line_for(rule, fname + "("),
                                f"table function {fname}() is not allowed: rules read {', '.join(sorted(READABLE))}")
            name = node.name.lower()
            if node.args.get("db") or node.args.get("catalog"):
                raise RuleError(path, line, f"rules may not name other schemas or databases ({node.sql()})")
            if name not in READABLE and id(node) not in cte_refs:
                hint = difflib.get_close_matches(name, sorted(READABLE), n=1)
                extra = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise RuleError(path, _line_for(rule, node.name),
                                f"unknown table {node.name!r}{extra}: rules read {', '.join(sorted(READABLE))}")
        if isinstance(node, exp.Func):
            # the name sqlglot knows it by, and the name DuckDB will be asked to run
            names = [node.sql_name() if not isinstance(node, exp.Anonymous) else node.name,
                     node.sql(dialect="duckdb").split("(")[0].strip().strip('"')]
            fname = next((n for n in names if FORBIDDEN_FUNCTIONS.match(n)), "")
            if fname:
                raise RuleError(path, _line_for(rule, fname + "("),
                                f"function {fname.lower()}() is not allowed in rules (it reaches outside the store)")
    outputs = {e.alias_or_name.lower() for e in _outputs(tree)}
    missing = {"x_lineitemid", "reason"} - outputs
    if missing and "*" not in outputs:
        raise RuleError(path, line, f"the query must return x_LineItemId and reason (missing: {', '.join(sorted(missing))})")
    used = {p.name for p in tree.find_all(exp.Placeholder) if p.name}
    unknown = used - set(rule.meta.params)
    if unknown:
        name = sorted(unknown)[0]
        raise RuleError(path, _line_for(rule, "$" + name), f"parameter ${name} is used but not declared under params")
    if any(isinstance(p, exp.Placeholder) and not p.name for p in tree.find_all(exp.Placeholder)):
        raise RuleError(path, line, "use named parameters ($name), not positional ones")
    return tree


def _cte_references(rule: Rule, tree: exp.Expr) -> set[int]:
    """The table references (by node id) that name a CTE visible where they stand.  A CTE's name is only in scope
    in its own query: ``(WITH ingest_log AS (...) SELECT ...)`` inside a subquery does not make ``ingest_log``
    elsewhere in the rule mean the CTE (there it would be the store's table)."""
    try:
        scopes = traverse_scope(tree)
    except Exception:  # a query whose scopes sqlglot cannot follow is not a query we can vouch for
        raise RuleError(rule.path, rule.sql_line, "the query's table references cannot be analysed") from None
    return {id(t) for sc in scopes for t in sc.tables if t.name in sc.cte_sources and not t.args.get("db")}


def _line_for(rule: Rule, needle: str) -> int:
    """The file line of the first query line that mentions needle (else the query's first line)."""
    for i, text in enumerate(rule.sql.splitlines()):
        if needle.lower() in text.lower():
            return rule.sql_line + i
    return rule.sql_line


def _outputs(tree: exp.Expr) -> list[exp.Expr]:
    q = tree
    while isinstance(q, exp.SetOperation):
        q = q.left
    return list(q.expressions) if isinstance(q, exp.Select) else []


@dataclass
class RuleSet:
    rules: list[Rule]

    def get(self, key: str) -> Rule:
        for r in self.rules:
            if key in (r.id, r.name):
                return r
        names = [r.id for r in self.rules] + [r.name for r in self.rules]
        hint = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
        extra = f"; did you mean {', '.join(hint)}?" if hint else ""
        raise BillingAuditError(f"unknown rule {key!r}{extra}")

    def select(self, select: list[str] | None = None, exclude: list[str] | None = None) -> list[Rule]:
        """Rules chosen by id, name or category (exclude wins)."""

        def matches(r: Rule, key: str) -> bool:
            return key in (r.id, r.name, r.category) or r.name.startswith(key + ".")

        for key in (select or []) + (exclude or []):
            if not any(matches(r, key) for r in self.rules):
                names = [r.id for r in self.rules] + [r.name for r in self.rules] + list(CATEGORIES)
                hint = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
                extra = f"; did you mean {', '.join(hint)}?" if hint else ""
                raise BillingAuditError(f"no rule matches {key!r}{extra}")
        chosen = [r for r in self.rules if not select or any(matches(r, k) for k in select)]
        return [r for r in chosen if not any(matches(r, k) for k in (exclude or []))]


def builtin_dir() -> Path:
    """The folder the built-in rules load from (their case files sit beside them)."""
    for cand in BUILTIN_DIR_CANDIDATES:
        # Holding rule files, so an unrelated site-packages/rules package is never taken for it.
        if cand.is_dir() and any(cand.glob("*.sql")):
            return cand
    raise BillingAuditError("the built-in rules folder is missing from this installation")


def load_rules(extra_dirs: list[Path] | None = None, *, builtin: bool = True) -> RuleSet:
    """The built-in rules plus every *.sql under the given folders; ids must be unique.

    Only ``*.sql`` files are rules: the ``*.cases.yaml`` case files beside them are not loaded here.
    """
    files: list[tuple[Path, bool]] = []
    if builtin:
        files += [(p, True) for p in sorted(builtin_dir().glob("*.sql"))]
    for d in extra_dirs or []:
        d = Path(d)
        if not d.exists():
            raise BillingAuditError(f"{d}: rules folder does not exist")
        found = sorted(d.rglob("*.sql")) if d.is_dir() else [d]
        if not found:
            raise BillingAuditError(f"{d}: no .sql rule files in this folder")
        files += [(p, False) for p in found]
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    for path, is_builtin in files:
        rule = parse_rule_file(path, builtin=is_builtin)
        for key in (rule.id, rule.name):
            if key in seen:
                raise RuleError(path, 2, f"duplicate rule {'id' if key == rule.id else 'name'} {key!r} (also in {seen[key].path})")
            seen[key] = rule
        rules.append(rule)
    return RuleSet(rules)


def coerce_param(rule: Rule, name: str, value: str) -> Any:
    """A --param value typed like the parameter's default (lists split on commas)."""
    default = rule.meta.params[name].default
    try:
        if isinstance(default, bool):
            return value.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
        if isinstance(default, list):
            return [v.strip() for v in value.split(",") if v.strip()]
    except ValueError:
        raise BillingAuditError(f"--param {name}={value}: expected a {type(default).__name__} for rule {rule.id}") from None
    return value
