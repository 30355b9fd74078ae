"""Spark over the providers' raw export files: the deliveries and mappings local ingest uses, run by Spark.

``billing-audit audit FOLDER --engine spark --source raw`` reads the export files where they are instead of
the store's canonical lines:

1. **On the driver**, the files are grouped into deliveries by the same code local ingest uses
   (:func:`billing_audit.deliveries.group`: manifests, folder layouts, folder stamps), and each file's
   columns are probed and its format detected by the same functions (:func:`billing_audit.reader.probe_columns`,
   :func:`billing_audit.reader.detect`, the formats' own ``detect()``).
2. The mapping is the same SQL: :meth:`billing_audit.reader.MappedFile.mapped_sql` (the format's ``render()``
   over the typed ``src`` relation, then the canonical columns), with the reader's DuckDB macros
   (``ba_num``, ``ba_ts``, ``ba_tags``, ...) inlined on the syntax tree and the whole translated to Spark SQL
   by :func:`billing_audit.engines.portable.to_engine`.  DuckDB's ``error()`` becomes Spark's ``raise_error``,
   so a value local ingest refuses (an unreadable number, an implausible date, a missing required amount) fails
   the run here too, naming the file (and the row and column where the mapping names them).
3. **Newest per slice**, as the store keeps it: each delivery's slices (provider x billing account x billing
   period) and the times its rows carry (``x_ExportTime``, the latest ``ChargePeriodEnd``) come back to the
   driver as a small aggregate; the driver orders the deliveries of each export with
   :func:`billing_audit.deliveries.order_key` exactly as the store does, and Spark keeps only the lines of each
   slice's newest delivery.
4. **Overlaps counted once**, as the store counts them: where two exports deliver the same slice, the lines both
   hold are counted in one of them by the ``[exports]`` policy (:class:`Overlaps`), said in the store's notes.
   ``--spark-write-lines URI`` writes the kept lines in the layout of ``billing-audit lines-export``
   (:func:`write_lines`).

What the raw path covers, on a local folder (the driver and the executors see the same paths: ``local[N]`` or a
shared file system), each file read as local ingest reads it (:func:`billing_audit.reader.readable`: a zip's
members and a tarball's files unpacked, a CSV with mixed line endings normalised, on the driver, into temporary
copies the plan holds until it is closed):

- **parquet** whose mapping translates: AWS CUR 2.0, legacy CUR parquet, AWS FOCUS, Azure cost details parquet,
  GCP's billing export (standard and resource-level tables; its nested records through ``to_json`` and JSON paths,
  as locally).  Hive partition columns DuckDB reads from the path (``BILLING_PERIOD=2026-10``) are added with the
  type DuckDB gives them; ``file_row_number`` is Spark's ``_metadata.row_index``;
- **NDJSON** ``.json`` / ``.json.gz`` (GCP's billing export as ``bq extract`` writes it): on the driver the local
  reader's own ``read_json`` over the whole file (``sample_size=-1``, not a sample) gives the types, which become an
  explicit Spark schema (:func:`json_schema`), so Spark parses with exactly those types; a column DuckDB types
  ``JSON`` (scalars mixing numbers and strings, lists empty everywhere) is read as its JSON text
  (:func:`_json_text`), dates and times as text for the mapping's own casts; the record number is the file's
  order (:func:`_json_frame`);
- **CSV and CSV.gz** (legacy CUR with its manifests, FOCUS, Azure cost details and Azure FOCUS; numbers written with
  a decimal comma, as the local reader sniffs them, read by its own ``ba_num_dc`` inlined as the other macros): the
  header, delimiter, duplicate names (``#n``) and encoding check are the local reader's own (on the driver); Spark reads
  every column as text with the options that give DuckDB's ``read_csv`` values (:func:`_csv_frame`), one
  partition a file, so the record number (line ids, source rows) is local ingest's ``row_number() OVER ()``;
- DuckDB's JSON functions on text (tags, nested records): ``json_valid``, ``json_type``, ``json_transform``
  (:func:`_json_node`), ``json_extract_string`` (sqlglot: ``get_json_object``); ``regexp_full_match`` as an
  anchored ``RLIKE``;
- slash dates held as text (``1/2/2026``, ``10/01/26 3:04 PM``): the local reader decides day or month first from
  the whole file, on the driver, and its list of formats becomes Spark's ``try_to_timestamp`` patterns, the
  first that reads the value winning (:func:`_java_slash`).  Each file's mapping is planned without Spark's
  CollapseProject and checkpointed lazily (:func:`mapped_lines`), or a CSV's text-parsing columns would be
  copied into every reference to them until the plan does not fit the driver.

So line ids and source rows are local ingest's.  What it refuses, each with the file named, rather than misread:

- a JSON *array* file (one document holding every record, which local ingest reads): Spark reads JSON a record a
  line, and an array would be one document read whole by one task; a read_json type with no Spark reading here
  (:func:`_spark_json_type`); a CSV
  record with another number of fields than the header, and bytes that are not UTF-8 (Spark decodes them to
  U+FFFD, so a file holding U+FFFD itself is refused as well): the run fails naming the file, row and column;
- price files (``billing-audit prices``): load them into the store, whose references the run broadcasts;
- on a cluster (not a local master), what the driver unpacks from a lake file (a zip or tarball member, a CSV
  rewritten for its mixed line endings): the executors cannot read the driver's disk.

Lake URIs (``s3a://``, ``abfss://``, ``gs://``, any file system Spark's Hadoop configuration reads) are staged on
the driver by :mod:`connectors.spark.lake` and planned as a local folder (:func:`plan_sources`); the executors
read each file from its URI.

Any file refused refuses the run (nothing is audited without it): :func:`refuse_errors`.  A file of no rows is an
error, as locally.  The run prices spot lines as a local tag run does
(:mod:`billing_audit.engines.priced`: the export's own on-demand cost, the store's price references, the bill's
own on-demand lines), so its spot savings are the local report's.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
from sqlglot import exp

from billing_audit import deliveries as dl
from billing_audit import formats as fm
from billing_audit import reader
from billing_audit.engines.portable import NotPortable, parse, to_engine
from billing_audit.errors import BillingAuditError, InputError
from billing_audit.sql import lit

if TYPE_CHECKING:
    from connectors.spark.lake import Staged

VIEW = "ba_raw_file"  # the Spark view a file's mapping reads in place of DuckDB's read_parquet(...)

_MACRO = re.compile(r"CREATE OR REPLACE TEMP MACRO (\w+)\((.*?)\) AS \((.*)\)\s*$", re.S)


@dataclass(frozen=True)
class _Macro:
    params: tuple[tuple[str, exp.Expression | None], ...]  # name, default
    body: exp.Expression


def _scalar(sql: str) -> exp.Expression:
    select = parse(f"SELECT {sql}", "duckdb")
    assert isinstance(select, exp.Select)
    first = select.selects[0]
    assert isinstance(first, exp.Expression)
    return first


@functools.cache
def macros() -> dict[str, _Macro]:
    """The reader's DuckDB macros (``billing_audit.reader.MACROS``) as syntax trees, by name."""
    out = {}
    for text in reader.MACROS:
        m = _MACRO.match(text.strip())
        assert m, f"reader macro changed shape: {text[:60]}"
        params = []
        for p in m.group(2).split(","):
            name, _, default = p.partition(":=")
            params.append((name.strip(), _scalar(default) if default.strip() else None))
        out[m.group(1)] = _Macro(tuple(params), _scalar(f"({m.group(3)})"))
    return out


def _expand(call: exp.Anonymous, macro: _Macro) -> exp.Expression:
    args: dict[str, exp.Expression] = {}
    positional = [a for a in call.expressions if not isinstance(a, exp.PropertyEQ)]
    for (name, _), a in zip(macro.params, positional, strict=False):
        args[name] = a
    for a in call.expressions:
        if isinstance(a, exp.PropertyEQ):
            args[a.this.name] = a.expression
    for name, default in macro.params:
        if name not in args:
            if default is None:
                raise NotPortable(f"macro {call.name}: no value for {name}")
            args[name] = default
    body = copy.deepcopy(macro.body)

    def sub(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in args:
            return exp.Paren(this=copy.deepcopy(args[node.name]))
        return node

    return body.transform(sub)


def inline_macros(tree: exp.Expression) -> exp.Expression:
    """Every call of a reader macro replaced by its body (macros calling macros: until none is left)."""
    known = macros()
    for _ in range(20):
        calls = [n for n in tree.find_all(exp.Anonymous) if n.name.lower() in known]
        if not calls:
            return tree
        for n in calls:
            n.replace(_expand(n, known[n.name.lower()]))
    raise NotPortable("reader macros nest too deep")


REFUSED_SLASH = "slash dates held as text are not read by the raw Spark path (ingest the file locally)"


def _refuse_slash(value: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="RAISE_ERROR", expressions=[
        exp.DPipe(this=exp.Literal.string(REFUSED_SLASH + ": "),
                  expression=exp.Cast(this=value.copy(), to=exp.DataType.build("TEXT")))])


_JAVA_TIME = {"%Y": "yyyy", "%m": "MM", "%d": "dd", "%H": "HH", "%M": "mm", "%S": "ss"}


def _java_format(fmt: str, fields: dict[str, str] = _JAVA_TIME) -> str:
    """A DuckDB strptime format of plain fields as Spark's datetime pattern, each field by `fields`; anything else
    does not translate."""
    out = []
    for p in re.split(r"(%.)", fmt):
        if p.startswith("%"):
            if p not in fields:
                raise NotPortable(f"strptime format {fmt!r}: {p} has no Spark pattern here")
            out.append(fields[p])
        elif p:
            if re.search(r"[A-Za-z']", p):
                raise NotPortable(f"strptime format {fmt!r}: literal text does not translate")
            out.append(p)
    return "".join(out)


_JSON_SCALARS = {"VARCHAR": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE", "BOOLEAN": "BOOLEAN"}


def _json_structure(structure: Any) -> str:
    """A DuckDB ``json_transform`` structure (``"VARCHAR"``, ``["..."]``, ``{"k": ...}``, ``"MAP(VARCHAR, VARCHAR)"``)
    as the Spark type ``from_json`` reads the same way (a missing member NULL, a scalar read as text as written)."""
    if isinstance(structure, str):
        if structure == "MAP(VARCHAR, VARCHAR)":
            return "MAP<STRING, STRING>"
        if structure in _JSON_SCALARS:
            return _JSON_SCALARS[structure]
    elif isinstance(structure, list) and len(structure) == 1:
        return f"ARRAY<{_json_structure(structure[0])}>"
    elif isinstance(structure, dict) and structure:
        fields = []
        for k, v in structure.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise NotPortable(f"json_transform member {k!r} has no Spark field name here")
            fields.append(f"{k}: {_json_structure(v)}")
        return f"STRUCT<{', '.join(fields)}>"
    raise NotPortable(f"json_transform to {json.dumps(structure)} has no Spark reading here")


def _json_node(n: exp.Expression) -> exp.Expression | None:
    """DuckDB's JSON functions on text, as the mappings use them: ``json_valid(x)`` -> ``try_parse_json(x) IS NOT
    NULL``; ``json_type(x)`` -> the first word of ``schema_of_variant`` (``OBJECT``, ``ARRAY``: DuckDB's names for
    them, the only ones the mappings compare); ``json_transform(x, '"MAP(VARCHAR, VARCHAR)"')`` -> ``from_json(x,
    'MAP<STRING, STRING>')`` (member values as text: scalars as written, objects and arrays as JSON, null NULL),
    and its lists and objects of those as ``ARRAY<...>`` and ``STRUCT<...>`` (:func:`_json_structure`)."""
    if isinstance(n, exp.Anonymous) and n.name.lower() == "json_valid" and len(n.expressions) == 1:
        return exp.Not(this=exp.Is(this=exp.Anonymous(this="TRY_PARSE_JSON", expressions=[n.expressions[0].copy()]),
                                   expression=exp.Null()))
    if isinstance(n, exp.JSONType):
        variant = exp.Anonymous(this="TRY_PARSE_JSON", expressions=[n.this.copy()])
        return exp.Anonymous(this="REGEXP_EXTRACT", expressions=[
            exp.Anonymous(this="SCHEMA_OF_VARIANT", expressions=[variant]), exp.Literal.string("^[A-Z]+"),
            exp.Literal.number(0)])
    if isinstance(n, exp.Anonymous) and n.name.lower() == "json_transform" and len(n.expressions) == 2:
        structure = n.expressions[1]
        if not (isinstance(structure, exp.Literal) and structure.is_string):
            raise NotPortable(f"json_transform to {structure.sql(dialect='duckdb')} has no Spark reading here")
        try:
            parsed = json.loads(structure.name)
        except ValueError:
            raise NotPortable(f"json_transform to {structure.name!r} has no Spark reading here") from None
        return exp.Anonymous(this="FROM_JSON", expressions=[n.expressions[0].copy(),
                                                             exp.Literal.string(_json_structure(parsed))])
    return None


# DuckDB's strptime reads 1 or 2 digits for %m %d %H %I; Spark's one-letter fields do the same when parsing
_JAVA_SLASH = {"%m": "M", "%d": "d", "%y": "yy", "%Y": "yyyy", "%H": "H", "%I": "h", "%M": "mm", "%S": "ss",
               "%p": "a"}


def _java_slash(fmt: str) -> str:
    """One of ba_try_ts's slash formats (``%m/%d/%y %I:%M %p``) as a Spark datetime pattern."""
    return _java_format(fmt, _JAVA_SLASH)


def _inline_flags(pattern: exp.Expression, flags: str) -> exp.Expression:
    if not set(flags) <= set("ims"):
        raise NotPortable(f"regular expression options {flags!r} other than i, m, s")
    if isinstance(pattern, exp.Literal):
        return exp.Literal.string(f"(?{flags}){pattern.name}")
    return exp.DPipe(this=exp.Literal.string(f"(?{flags})"), expression=pattern.copy())


def _regexp_node(n: exp.Expression) -> exp.Expression | None:
    """DuckDB's regexp options (``regexp_matches(x, p, 'i')``, ``regexp_replace(x, p, r, 'gi')``): Spark has no
    options argument (sqlglot drops it), so ``i``/``m``/``s`` go into the pattern as ``(?i)``; ``g`` is Spark's
    own regexp_replace (it replaces every match)."""
    if isinstance(n, exp.RegexpLike) and n.args.get("flag") is not None:
        flag = n.args["flag"]
        if not (isinstance(flag, exp.Literal) and flag.is_string):
            raise NotPortable("regexp_matches options that are not a literal")
        flags = flag.name.replace("c", "")
        pattern = _inline_flags(n.expression, flags) if flags else n.expression.copy()
        return exp.RegexpLike(this=n.this.copy(), expression=pattern)
    if isinstance(n, exp.RegexpReplace) and n.args.get("modifiers") is not None:
        mods = n.args["modifiers"]
        if not (isinstance(mods, exp.Literal) and mods.is_string):
            raise NotPortable("regexp_replace options that are not a literal")
        flags = mods.name.replace("g", "").replace("c", "")
        pattern = _inline_flags(n.expression, flags) if flags else n.expression.copy()
        return exp.RegexpReplace(this=n.this.copy(), expression=pattern, replacement=n.args["replacement"].copy())
    return None


def _spark_node(n: exp.Expression) -> exp.Expression | None:
    json = _json_node(n) or _regexp_node(n)
    if json is not None:
        return json
    if isinstance(n, exp.RegexpFullMatch):
        # DuckDB's regexp_full_match (ba_dc_ok: a decimal-comma number) -> Spark's partial RLIKE anchored at both
        # ends; \z, not $: Java's $ also matches before a final line break
        pattern = n.expression
        if not (isinstance(pattern, exp.Literal) and pattern.is_string):
            raise NotPortable("regexp_full_match with a pattern that is not a literal")
        return exp.RegexpLike(this=n.this.copy(), expression=exp.Literal.string(f"^(?:{pattern.name})\\z"))
    if isinstance(n, exp.Anonymous) and n.name.lower() == "error":
        return exp.Anonymous(this="RAISE_ERROR", expressions=[e.copy() for e in n.expressions])
    if isinstance(n, exp.Anonymous) and n.name.lower() == "try_strptime":
        value, fmt = n.expressions[0], n.expressions[1]
        if isinstance(fmt, exp.Literal) and fmt.is_string:
            return exp.Anonymous(this="TRY_TO_TIMESTAMP",
                                 expressions=[value.copy(), exp.Literal.string(_java_format(fmt.name))])
        if isinstance(fmt, exp.Array) and all(isinstance(f, exp.Literal) and f.is_string for f in fmt.expressions):
            # ba_try_ts's slash formats (the day or month order decided per file on the driver): the first that
            # reads the value, as DuckDB's try_strptime with a list
            return exp.Coalesce(this=exp.Anonymous(this="TRY_TO_TIMESTAMP", expressions=[
                value.copy(), exp.Literal.string(_java_slash(fmt.expressions[0].name))]), expressions=[
                exp.Anonymous(this="TRY_TO_TIMESTAMP", expressions=[value.copy(), exp.Literal.string(_java_slash(f.name))])
                for f in fmt.expressions[1:]])
        return _refuse_slash(value)
    if isinstance(n, exp.Anonymous) and n.name.lower() == "list_sum" and len(n.expressions) == 1:
        # DuckDB's list_sum skips NULLs and is NULL for no values; the mappings sum money (DECIMAL(38,12))
        lst = n.expressions[0].sql(dialect="spark")
        return parse(f"CASE WHEN SIZE(FILTER({lst}, v -> v IS NOT NULL)) = 0 THEN NULL ELSE AGGREGATE(FILTER({lst}, "
                     f"v -> v IS NOT NULL), CAST(0 AS DECIMAL(38,12)), (a, b) -> CAST(a + b AS DECIMAL(38,12))) END",
                     "spark")
    if isinstance(n, exp.ToMap) and isinstance(n.this, exp.Struct) and not n.this.expressions:
        return exp.Anonymous(this="MAP", expressions=[])
    if (isinstance(n, exp.Bracket) and len(n.expressions) == 1 and n.expressions[0].is_int
            and not (isinstance(n.this, exp.Column) and n.this.name.lower() == "tags")):
        # list[k] past the end is NULL in DuckDB, an error under ANSI Spark; sqlglot keeps indexes 0-based
        return exp.Anonymous(this="TRY_ELEMENT_AT",
                             expressions=[n.this.copy(), exp.Literal.number(int(n.expressions[0].name) + 1)])
    return None


def _spark_rewrites(tree: exp.Expression) -> exp.Expression:
    """What sqlglot leaves as DuckDB: error() -> raise_error(), MAP {} -> map(), list[k] -> try_element_at,
    try_strptime with one plain format -> try_to_timestamp, and slash-date parsing (decided per file by the
    local reader) refused.  Children first, so a rewritten node carries its rewritten arguments."""
    for node in reversed(list(tree.walk(bfs=False))):
        assert isinstance(node, exp.Expression)
        new = _spark_node(node)
        if new is not None:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


def _swap_reader(tree: exp.Expression, view: str) -> exp.Expression:
    """DuckDB's read_parquet(...)/read_csv(...) -> the file's Spark view; a CSV's record number (the reader's
    ``row_number() OVER ()``, in file order) -> the view's ``file_row_number + 1``, as for parquet."""
    found = False
    for t in list(tree.find_all(exp.Table)):
        text = t.sql(dialect="duckdb").lower()
        if isinstance(t.this, exp.ReadParquet) or any(f"read_{k}(" in text for k in ("parquet", "csv", "json")):
            t.replace(exp.Table(this=exp.to_identifier(view), alias=t.args.get("alias")))
            found = True
    if not found:
        raise NotPortable("the mapping reads no parquet, CSV or JSON file")
    for w in list(tree.find_all(exp.Window)):
        if isinstance(w.this, exp.RowNumber) and not w.args.get("partition_by") and not w.args.get("order"):
            w.replace(exp.Paren(this=exp.Add(this=exp.column("file_row_number"), expression=exp.Literal.number(1))))
    return tree


FILE_MARK = "billing-audit file|"  # raise_error's message starts with it, the file, "|" and the reader's message


def _json_text(tree: exp.Expression, names: set[str]) -> exp.Expression:
    """Columns Spark reads as their JSON text (an NDJSON column DuckDB types JSON, or a nested one holding JSON):
    DuckDB's ``to_json(c)`` and ``json_extract_string(c, '$')`` of them are that text itself (a string's value
    unquoted, anything else as JSON), so both become ``c``."""
    if not names:
        return tree

    def text_column(arg: exp.Expression | None) -> bool:
        return isinstance(arg, exp.Column) and arg.name in names

    for n in list(tree.find_all(exp.Anonymous, exp.JSONExtractScalar)):
        if isinstance(n, exp.Anonymous) and n.name.lower() == "to_json" and len(n.expressions) == 1 \
                and text_column(n.expressions[0]):
            n.replace(n.expressions[0].copy())
        elif isinstance(n, exp.JSONExtractScalar) and text_column(n.this) and isinstance(n.expression, exp.JSONPath) \
                and [type(e) for e in n.expression.expressions] == [exp.JSONPathRoot]:
            n.replace(n.this.copy())
    return tree


def spark_mapping(duck_sql: str, view: str = VIEW, display: str = "", json_text: set[str] | None = None) -> str:
    """A file's DuckDB mapping SELECT (``MappedFile.mapped_sql``) as Spark SQL over the view ``view``; a value
    the mapping refuses raises an error naming ``display`` (see :func:`refusal`).  ``json_text``: the columns
    Spark reads as JSON text (NDJSON: :func:`json_schema`)."""
    tree = parse(duck_sql, "duckdb")
    tree = _swap_reader(tree, view)
    tree = _json_text(tree, json_text or set())
    tree = inline_macros(tree)
    tree = _spark_rewrites(tree)
    for n in list(tree.find_all(exp.Anonymous)):
        if n.name.upper() == "RAISE_ERROR" and n.expressions:
            n.set("expressions", [exp.DPipe(this=exp.Literal.string(FILE_MARK + display + "|"),
                                            expression=n.expressions[0])])
    return to_engine(tree, "spark")


_REFUSED = re.compile(re.escape(FILE_MARK) + r"(.*?)\|(.*)")


def refusal(message: str) -> InputError | None:
    """The file, row and column a Spark failure names when a mapping refused a value (None: not a refusal)."""
    m = _REFUSED.search(message)
    if not m:
        return None
    display, rest = m.group(1), m.group(2).split(" SQLSTATE")[0].strip().rstrip(".")
    row = re.match(re.escape(fm.ROW_ERROR) + r"\|(\d+)\|([^|]*)\|(.*)", rest)
    if row:
        return InputError(display, row.group(3), row=int(row.group(1)), column=row.group(2))
    return InputError(display, rest)


# -- the plan: deliveries, kept files, their mappings (on the driver) -----------------------------------------------
@dataclass
class RawFile:
    path: Path
    display: str
    size: int
    format: str
    sql: str  # the Spark mapping over the view ``view``
    view: str
    partitions: dict[str, tuple[str, str]]  # hive partition column -> (value, DuckDB type), as DuckDB reads them
    kind: str = "parquet"
    columns: list[str] = field(default_factory=list)  # CSV: the header as the local reader names it (duplicates #n)
    delimiter: str = ","  # CSV: as the local reader sniffs it
    schema: str = ""  # NDJSON: the Spark schema (DDL) of the local reader's types (json_schema)
    uri: str | None = None  # a lake file: the URI the executors read (``path`` is the driver's staged copy)

    @property
    def location(self) -> str:
        """What Spark reads: the lake URI, else the local file."""
        return self.uri or str(self.path.resolve())


@dataclass
class RawDelivery:
    delivery: dl.Delivery
    index: int
    files: list[RawFile] = field(default_factory=list)
    error: InputError | None = None
    bytes: int | None = None  # its files' size, taken when planned (a lake file's staged copy is gone after)

    @property
    def size(self) -> int:
        return self.bytes if self.bytes is not None else sum(f.stat().st_size for f in self.delivery.files)


@dataclass
class Plan:
    """What a raw run reads: every delivery found (oldest first, as local ingest orders them), the errors.

    The zip members, tarballs and CSVs whose line endings local ingest normalises are read from temporary copies
    made on the driver (:func:`billing_audit.reader.readable`, as locally): they last until :meth:`close` (the
    plan is a context manager), so Spark must have read the lines by then."""

    deliveries: list[RawDelivery]
    errors: list[InputError]
    temp: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    # the interruption event files among the paths (recognised from their content, as local ingest does): small,
    # read on the driver into the store, where the report reads them (:func:`load_events`)
    events: list[Path] = field(default_factory=list)

    @property
    def readable(self) -> list[RawDelivery]:
        return [d for d in self.deliveries if d.error is None]

    def close(self) -> None:
        self.temp.close()

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


UNPACKED = ("unpacked on the driver (a zip or tar member, or a CSV rewritten for its mixed line endings), which "
            "the executors of a cluster cannot read: unpack it in the lake, or run with a local master "
            "(--spark-master 'local[*]')")
JSON_ARRAY = ("a JSON array file (one document holding every record), not newline-delimited JSON: local ingest "
              "reads it, but Spark reads JSON a record a line (an array is one document, read whole by one task); "
              "ingest it with `billing-audit ingest`, or extract it as NDJSON")
_JSON_SCALARS_SPARK = {"VARCHAR": "STRING", "BIGINT": "BIGINT", "INTEGER": "INT", "DOUBLE": "DOUBLE",
                       "BOOLEAN": "BOOLEAN", "UBIGINT": "DECIMAL(20,0)"}
# dates and times DuckDB's read_json recognises: read as their text, which the mapping's casts (ba_ts, CAST AS
# TIMESTAMP) then read as they read any text
_JSON_AS_TEXT = ("DATE", "TIME", "TIMESTAMP", "TIMESTAMP WITH TIME ZONE", "TIMESTAMP_NS", "TIMESTAMP_MS",
                 "TIMESTAMP_S")


def _spark_json_type(t: Any, column: str) -> str:
    """A DuckDB type ``read_json`` gave (a ``DuckDBPyType``) as the Spark DDL type its JSON reader parses the same."""
    name = str(t)
    if t.id == "struct":
        fields = ", ".join(f"`{k.replace('`', '``')}`: {_spark_json_type(v, column)}" for k, v in t.children)
        return f"STRUCT<{fields}>"
    if t.id == "list":
        return f"ARRAY<{_spark_json_type(t.children[0][1], column)}>"
    if name in _JSON_SCALARS_SPARK:
        return _JSON_SCALARS_SPARK[name]
    if name in _JSON_AS_TEXT:
        return "STRING"
    raise NotPortable(f"column {column}: read_json types it {name}, which has no Spark JSON reading here")


def json_schema(con: duckdb.DuckDBPyConnection, path: Path, cols: dict[str, str]) -> tuple[str, set[str], set[str]]:
    """The Spark schema (DDL) that parses an NDJSON file with the types the local reader gives it: ``cols`` is
    :func:`billing_audit.reader.probe_columns`, DuckDB's ``read_json`` over the whole file (``sample_size=-1``),
    not a sample.  A column whose type holds DuckDB's ``JSON`` (mixed scalars, lists that are empty everywhere)
    is read as its JSON text (the second value: :func:`_json_text` makes the mapping read it so); the third is
    the file's own columns (the others are hive partition columns DuckDB adds from the path)."""
    own = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_json({lit(str(path))}, format='auto', "
                                     "maximum_object_size=67108864, sample_size=-1, hive_partitioning=false)"
                                     ).fetchall()}
    fields, text = [], set()
    for c, typ in cols.items():
        if c not in own:  # a hive partition column (invoice_month=202610): added from the path (_partitions)
            continue
        if "JSON" in typ:
            fields.append(f"`{c.replace('`', '``')}` STRING")
            text.add(c)
            continue
        fields.append(f"`{c.replace('`', '``')}` {_spark_json_type(con.type(typ), c)}")
    return ", ".join(fields), text, own


def _json_array(path: Path) -> bool:
    """The file is one JSON array (``[{...}, {...}]``), not newline-delimited records."""
    head = reader.read_head(path, 4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _partitions(path: Path, cols: dict[str, str], own: set[str]) -> dict[str, tuple[str, str]]:
    """The hive partition columns DuckDB adds from the path (``BILLING_PERIOD=2026-10``), with their values."""
    values = {}
    for part in path.parts[:-1]:
        k, eq, v = part.partition("=")
        if eq:
            values[k] = v
    return {c: (values[c], t) for c, t in cols.items() if c not in own and c in values}


def plan_sources(sources: list[str], *, spark: Callable[[], Any], follow_outside: bool = False) -> Plan:
    """:func:`plan` over local paths and lake URIs (:mod:`connectors.spark.lake`: staged through Spark's file
    systems, so ``spark()`` is called only when a URI is among them).  What the driver unpacks from a lake file
    (a zip member, ...) is read from the driver's disk: only with a local master, whose executors share it."""
    from connectors.spark import lake

    uris = [s for s in sources if reader.is_uri(s)]
    if not uris:
        return plan([Path(s) for s in sources], follow_outside=follow_outside)
    stack = contextlib.ExitStack()
    try:
        session = spark()
        staged = lake.stage(session, uris, stack)
        p = plan([Path(s) for s in sources if not reader.is_uri(s)] + staged.roots, follow_outside=follow_outside,
                 staged=staged, driver_local=str(session.sparkContext.master).startswith("local"))
    except BaseException:
        stack.close()
        raise
    p.temp.push(stack.pop_all())
    return p


def plan(paths: list[Path], *, follow_outside: bool = False, staged: Staged | None = None,
         driver_local: bool = True) -> Plan:
    """Group the files under ``paths`` into deliveries exactly as local ingest does and map each file of each
    delivery (a delivery that cannot be read whole is reported and not read, as locally).  Close the plan
    (``with raw.plan(...) as p``) once Spark has read the lines: it holds the temporary copies.  ``staged``
    (:class:`connectors.spark.lake.Staged`): the paths hold lake files' staged copies, which Spark reads from the
    lake (each copy deleted once its delivery is planned)."""
    from billing_audit import events, pricing

    stack = contextlib.ExitStack()
    try:
        aside: list[Path] = []
        deliveries, errors = dl.group(paths, unpack=stack, follow_outside=follow_outside,
                                      set_aside=lambda f: pricing.is_price_file(f) or events.is_event_file(f),
                                      aside=aside)
        errors = list(errors)
        event_files = [p for p in aside if not pricing.is_price_file(p)]
        for p in aside:
            if p not in event_files:
                errors.append(InputError(reader.display_name(p), "a price reference: an engine holds no price "
                                         "references (load it with `billing-audit ingest`); not read"))
        for p in event_files:  # read once here, so that a bad event file refuses the run before any work
            try:
                events.read_file(p, reader.display_name(p))
            except InputError as e:
                errors.append(e)
        out = []
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        reader.install_macros(con)
        try:
            for i, d in enumerate(deliveries):
                rd = RawDelivery(d, i)
                out.append(rd)
                try:
                    for f in d.files:
                        rd.files.extend(_map_file(con, d, f, f"ba_raw_{i}_{len(rd.files)}", stack, staged,
                                                  driver_local))
                except InputError as e:
                    rd.error = e
                    rd.files = []
                if staged is not None:  # the executors read the lake: the driver's copies have served
                    rd.bytes = sum(staged.sizes[str(f)] if str(f) in staged.sizes else f.stat().st_size for f in d.files)
                    for f in d.files:
                        if staged.source(f) is not None:
                            f.unlink(missing_ok=True)
        finally:
            con.close()
    except BaseException:
        stack.close()
        raise
    return Plan(out, errors, stack, event_files)


def load_events(con: duckdb.DuckDBPyConnection, p: Plan) -> list[str]:
    """The plan's interruption event files into the store's ``interruption_events`` as local ingest loads them (an
    event already held is counted once); returns the notes local ingest prints of them."""
    from billing_audit import events

    if not p.events:
        return []
    load = events.load_paths(con, p.events)
    if load.errors:  # read once already by plan(): a file that changed since
        raise BillingAuditError("--source raw: " + "; ".join(str(e) for e in load.errors))
    return load.notes()


def _map_file(con: duckdb.DuckDBPyConnection, d: dl.Delivery, f: Path, view: str,
              stack: contextlib.ExitStack, staged: Staged | None = None, driver_local: bool = True) -> list[RawFile]:
    """The file's mapped parts, as local ingest reads them (:func:`billing_audit.reader.readable`: a zip's
    members, a CSV with mixed line endings from a normalised copy)."""
    from billing_audit.store import _part_fp

    out: list[RawFile] = []
    lake = staged.source(f) if staged is not None else None
    from_lake = lake is not None or reader.is_uri(reader.display_name(f))  # a lake tarball's member: unpacked here
    for local, display in stack.enter_context(reader.readable(f)):
        uri = lake if local == f else None
        if from_lake and uri is None and not driver_local:
            raise InputError(display, UNPACKED)
        kind = reader.file_kind(local)
        if kind == "json" and _json_array(local):
            raise InputError(display, JSON_ARRAY)
        cols = reader.probe_columns(con, local, display, kind)
        fmt = reader.detect(cols, kind, display)
        if not d.export:  # as local ingest: the export its layout says, else the delivery's own
            d.export = fmt.export_of(f) or d.key
        mf = reader.MappedFile(local, display, kind, fmt, cols)
        fp = _part_fp(d.fingerprints()[f], display, display == reader.display_name(f))
        duck = mf.mapped_sql(con, fp=fp, ingest_id=0)
        part_view = view if len(out) == 0 else f"{view}_{len(out)}"
        schema, text, own = "", set[str](), set[str]()
        try:
            if kind == "json":
                schema, text, own = json_schema(con, local, cols)
            sql = spark_mapping(duck, part_view, display, text)
        except NotPortable as e:
            raise InputError(display, f"its {fmt.id} mapping does not translate to Spark: {e}") from None
        if kind == "json":
            out.append(RawFile(local, display, local.stat().st_size, fmt.id, sql, part_view,
                               _partitions(local, cols, own), kind,
                               list(cols), schema=schema, uri=uri))
            continue
        if kind == "csv":
            out.append(RawFile(local, display, local.stat().st_size, fmt.id, sql, part_view, {}, kind,
                               list(cols), mf.delimiter, uri=uri))
            continue
        own = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet({lit(str(local))}, "
                                         "hive_partitioning = false)").fetchall()}
        out.append(RawFile(local, display, local.stat().st_size, fmt.id, sql, part_view,
                           _partitions(local, cols, own), uri=uri))
    return out


# -- on Spark: the mapped lines, newest delivery per slice ----------------------------------------------------------
_SPARK_TYPES = {"VARCHAR": "string", "BIGINT": "bigint", "INTEGER": "int", "DATE": "date", "DOUBLE": "double",
                "TIMESTAMP": "timestamp", "BOOLEAN": "boolean"}


CORRUPT = "_ba_corrupt_record"
REPLACEMENT = "\ufffd"  # what Spark's UTF-8 decoder puts for bytes that are not UTF-8


def _csv_frame(spark: Any, f: RawFile) -> Any:
    """A CSV as the local reader's ``read_csv`` gives it (:func:`billing_audit.reader.reader_sql`): the header's
    names (duplicates ``#n``) in order, every column text, ``"` quoting with ``""`` escapes, values untrimmed, empty
    and ``""`` fields NULL, blank lines skipped, a quoted value over several lines one record.  ``multiLine`` reads
    each file as one partition in file order, so the record number is ``monotonically_increasing_id``.  A record
    with another number of fields than the header, and a value holding bytes that are not UTF-8 (Spark decodes
    them to U+FFFD: a file holding U+FFFD itself is refused too), fail the run naming the file, row and column,
    as locally (DuckDB refuses both)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(c, StringType()) for c in f.columns] + [StructField(CORRUPT, StringType())])
    df = (spark.read.schema(schema)
          .options(header=True, multiLine=True, sep=f.delimiter, quote='"', escape='"', encoding="UTF-8",
                   mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT, enforceSchema=True,
                   ignoreLeadingWhiteSpace=False, ignoreTrailingWhiteSpace=False)
          .csv(f.location))
    if df.rdd.getNumPartitions() != 1:  # never: multiLine CSV is not splittable
        raise InputError(f.display, "Spark split the CSV file: its record numbers would not be local ingest's")
    df = df.select("*", F.monotonically_increasing_id().alias("file_row_number"))

    def refuse(column: str, message: str) -> Any:
        return F.raise_error(F.concat(F.lit(f"{FILE_MARK}{f.display}|{fm.ROW_ERROR}|"),
                                      (F.col("file_row_number") + 1).cast("string"), F.lit(f"|{column}|{message}")))

    sep = reader.DELIMITER_NAMES[f.delimiter]
    check = F.when(F.col(CORRUPT).isNotNull(), refuse("", f"malformed row: the header has {len(f.columns)} columns, "
                                                           f"this {sep}-delimited row another number of fields"))
    for c in f.columns:
        shown = re.sub(re.escape(reader.DUP_MARK) + r"\d+$", "", c)
        check = check.when(F.instr(F.col("`" + c.replace("`", "``") + "`"), REPLACEMENT) > 0,
                           refuse(shown, "not UTF-8 text; re-save the file as UTF-8"))
    return df.where(check.otherwise(F.lit(True))).drop(CORRUPT)


def _json_frame(spark: Any, f: RawFile) -> Any:
    """An NDJSON file parsed with the local reader's types (:func:`json_schema`), its record number local ingest's
    ``row_number() OVER ()`` (file order: the split's offset, then the order within it).  A line that is not a
    JSON record fails the run naming the file and row (the driver's read_json of the whole file already refuses
    one, as locally)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812

    df = (spark.read.schema(f"{f.schema}, `{CORRUPT}` STRING")
          .options(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT, encoding="UTF-8")
          .json(f.location))
    df = df.select("*", F.col("_metadata.file_block_start").alias("_ba_block"),
                   F.monotonically_increasing_id().alias("_ba_seq"))
    df = df.select("*", (F.row_number().over(Window.orderBy("_ba_block", "_ba_seq")) - 1).alias("file_row_number"))
    bad = F.raise_error(F.concat(F.lit(f"{FILE_MARK}{f.display}|{fm.ROW_ERROR}|"),
                                 (F.col("file_row_number") + 1).cast("string"), F.lit("||not a JSON record")))
    df = df.where(F.when(F.col(CORRUPT).isNotNull(), bad).otherwise(F.lit(True))).drop(CORRUPT, "_ba_block", "_ba_seq")
    return _with_partitions(df, f)


def _with_partitions(df: Any, f: RawFile) -> Any:
    """The hive partition columns DuckDB reads from the path, with the type DuckDB gives them."""
    from pyspark.sql import functions as F  # noqa: N812

    for col, (value, typ) in f.partitions.items():
        if typ not in _SPARK_TYPES:
            raise InputError(f.display, f"partition column {col}={value} read as {typ}: not mapped on Spark")
        df = df.withColumn(col, F.lit(value).cast(_SPARK_TYPES[typ]))
    return df


def _file_frame(spark: Any, f: RawFile) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    if f.kind == "csv":
        return _csv_frame(spark, f)
    if f.kind == "json":
        return _json_frame(spark, f)
    df = _with_partitions(spark.read.parquet(f.location), f)
    return df.select("*", F.col("_metadata.row_index").alias("file_row_number"))


@dataclass
class Slice:
    provider: str
    account: str | None
    period: Any  # datetime | None
    lines: int  # the lines the delivery holds in the slice
    delivery: int  # RawDelivery.index
    gone: dict[int, int] = field(default_factory=dict)  # content key -> its first lines set aside by an overlap

    @property
    def left(self) -> int:
        """The lines the slice keeps: all but those another export counts (:class:`Overlaps`)."""
        return self.lines - sum(self.gone.values())

    @property
    def key(self) -> tuple[str, str | None, Any]:
        return (self.provider, self.account, self.period)


@dataclass
class Kept:
    """Which delivery each slice's lines come from, the slices of older deliveries left out, and what the
    overlaps of exports set aside (said in ``notes``, in the store's words)."""

    kept: list[Slice]
    superseded: list[Slice]
    overlapped: list[Slice] = field(default_factory=list)  # every line counted in another export: set aside
    notes: list[str] = field(default_factory=list)
    overlapped_rows: int = 0

    @property
    def lines(self) -> int:
        return sum(s.left for s in self.kept)


def _reason(e: Exception) -> str:
    from connectors.spark.engine import _reason as reason

    return reason(e)


EXCLUDED = "spark.sql.optimizer.excludedRules"
COLLAPSE = "org.apache.spark.sql.catalyst.optimizer.CollapseProject"


def mapped_lines(spark: Any, p: Plan) -> Any:
    """Every readable delivery's lines, mapped to canonical columns, with ``_ba_delivery`` (its index)."""
    from pyspark.sql import functions as F  # noqa: N812

    frames = []
    # Each file's mapping is planned without CollapseProject, and checkpointed lazily: merged into the mapping's
    # outer SELECTs, the typed source columns (text parsed by the inlined reader macros: a CSV's dates and numbers)
    # would be copied into every reference to them until the plan no longer fits the driver (a legacy CUR CSV
    # does).  The checkpoint is the barrier: the slice aggregates and filter that follow are not pushed into the
    # mapping, and each file is mapped once, on first use.
    before = spark.conf.get(EXCLUDED, None)
    spark.conf.set(EXCLUDED, ",".join(r for r in (before, COLLAPSE) if r))
    try:
        for d in p.readable:
            for f in d.files:
                try:
                    _file_frame(spark, f).createOrReplaceTempView(f.view)
                    frames.append(spark.sql(f.sql).withColumn("_ba_delivery", F.lit(d.index))
                                  .localCheckpoint(eager=False))
                except InputError:
                    raise
                except Exception as e:  # noqa: BLE001 - Spark's AnalysisException: the file cannot be mapped here
                    raise InputError(f.display, f"Spark cannot map it as {f.format}: {_reason(e)}") from None
    finally:
        if before is None:
            spark.conf.unset(EXCLUDED)
        else:
            spark.conf.set(EXCLUDED, before)
    if not frames:
        raise BillingAuditError("no export file Spark can read was found (see the errors above)")
    out = frames[0]
    for fr in frames[1:]:
        out = out.unionByName(fr)
    return out


def keep_newest(spark: Any, p: Plan, lines: Any, policy: dl.OverlapPolicy | None = None) -> Kept:
    """Newest delivery per export x provider x billing account x period, decided as the store decides it
    (:meth:`billing_audit.store.Store._settle_slices`): the deliveries in ingest order, each slice kept by
    the later one unless the one holding it is strictly newer (``deliveries.order_key``); a delivery dated only
    by its files' times is dated by its rows (the newest ``x_ExportTime``, else the latest ``ChargePeriodEnd``)."""
    from pyspark.sql import functions as F  # noqa: N812

    try:
        per_file = lines.groupBy("_ba_delivery", "x_SourceFile", "x_Provider", "BillingAccountId",
                                 "BillingPeriodStart").agg(F.count(F.lit(1)).alias("n"),
                                                           F.max("x_ExportTime").alias("export_time"),
                                                           F.max("ChargePeriodEnd").alias("usage")).collect()
    except Exception as e:  # noqa: BLE001 - a value a mapping refused, or a file Spark cannot read
        raise input_error(e) from None
    with_rows = {(int(r["_ba_delivery"]), r["x_SourceFile"]) for r in per_file}
    for d in p.readable:  # as local ingest: a file of no lines is an error, not a delivery of nothing
        for f in d.files:
            if (d.index, f.display) not in with_rows:
                raise InputError(f.display, "file has a header but no data rows")
    merged: dict[tuple[int, str, str | None, Any], dict[str, Any]] = {}
    for r in per_file:
        k = (int(r["_ba_delivery"]), r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"])
        m = merged.setdefault(k, {"x_Provider": k[1], "BillingAccountId": k[2], "BillingPeriodStart": k[3],
                                  "count(1)": 0, "max(x_ExportTime)": None, "max(ChargePeriodEnd)": None})
        m["count(1)"] += int(r["n"])
        for out, got in (("max(x_ExportTime)", r["export_time"]), ("max(ChargePeriodEnd)", r["usage"])):
            if got is not None and (m[out] is None or got > m[out]):
                m[out] = got
    by_delivery: dict[int, list[Any]] = {}
    for (index, *_), m in merged.items():
        by_delivery.setdefault(index, []).append(m)
    owners: dict[tuple[str, str, str | None, Any], tuple[RawDelivery, Slice]] = {}
    superseded: list[Slice] = []
    overlaps = Overlaps(lines, p, by_delivery, policy or dl.OverlapPolicy())
    for d in p.readable:
        got = by_delivery.get(d.index, [])
        dv = d.delivery
        if dv.version_source == "file time":
            export_time = max((r["max(x_ExportTime)"] for r in got if r["max(x_ExportTime)"] is not None), default=None)
            usage = max((r["max(ChargePeriodEnd)"] for r in got if r["max(ChargePeriodEnd)"] is not None), default=None)
            if export_time is not None:
                dv.version, dv.version_source = export_time.replace(tzinfo=UTC), "export_time"
            elif usage is not None:
                dv.version, dv.version_source = usage.replace(tzinfo=UTC), "latest usage"
        for r in got:
            s = Slice(r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"], int(r["count(1)"]), d.index)
            key = (dv.export, *s.key)
            owner = owners.get(key)
            if owner is not None and owner[0].delivery.key != dv.key and owner[0].delivery.order > dv.order:
                superseded.append(s)
                continue
            if owner is not None:
                superseded.append(owners.pop(key)[1])
            if overlaps.settle(d, s, owners) > 0:
                owners[key] = (d, s)
    return Kept([s for _, s in owners.values()], superseded, overlaps.set_aside, overlaps.notes, overlaps.rows)


# What makes two lines of two exports the same line: the store's LINE_CONTENT (billing_audit.store), as one key
CONTENT = ("x_Provider", "BillingAccountId", "SubAccountId", "ResourceId", "ChargePeriodStart", "ChargePeriodEnd",
           "ChargeCategory", "coalesce(x_UsageType, ChargeDescription)", "ConsumedQuantity", "BilledCost",
           "BillingCurrency")


def _content_key() -> Any:
    """A line's content (:data:`CONTENT`) as one 64-bit key, as the store's ``hash(...)`` of it: each value
    named in a JSON object, so NULLs and neighbouring columns are told apart."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.xxhash64(F.to_json(F.struct(*[F.expr(c).alias(f"c{i}") for i, c in enumerate(CONTENT)])))


class Overlaps:
    """Exports delivering the same lines for one provider x billing account x period, settled as the store
    settles them (:meth:`billing_audit.store.Store._settle_overlap`), delivery after delivery in ingest order:
    where a slice's delivery and another export's current one share lines (same :data:`CONTENT`), the export the
    ``[exports]`` policy ranks lower (then fewer lines, then the older delivery) gives up its copies of them, its
    first lines of each content by source file and row, and nothing else; ``keep = "both"`` counts both.

    The counts come from Spark once (:meth:`_load`): per delivery, slice and content key, only for the slices
    two exports deliver and the contents both hold (on the driver: one row per line two exports share)."""

    def __init__(self, lines: Any, p: Plan, by_delivery: dict[int, list[Any]], policy: dl.OverlapPolicy) -> None:
        self.lines, self.policy = lines, policy
        self.deliveries = {d.index: d for d in p.readable}
        exports: dict[tuple[str, str | None, Any], set[str]] = {}
        for index, got in by_delivery.items():
            for r in got:
                exports.setdefault((r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"]), set()).add(
                    self.deliveries[index].delivery.export)
        self.shared_keys = {k for k, names in exports.items() if len(names) > 1}
        self.pairs = [(index, (r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"]))
                      for index, got in by_delivery.items() for r in got
                      if (r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"]) in self.shared_keys]
        self.counts: dict[tuple[int, tuple[str, str | None, Any]], dict[int, tuple[int, Any, Any]]] | None = None
        self.set_aside: list[Slice] = []
        self.notes: list[str] = []
        self.rows = 0

    def _load(self) -> dict[tuple[int, tuple[str, str | None, Any]], dict[int, tuple[int, Any, Any]]]:
        from functools import reduce

        from pyspark.sql import Window
        from pyspark.sql import functions as F  # noqa: N812

        if self.counts is not None:
            return self.counts
        export = F.create_map(*[x for i, d in self.deliveries.items()
                                for x in (F.lit(i), F.lit(d.delivery.export))])[F.col("_ba_delivery")]
        cond = reduce(lambda a, b: a | b, [_slice_rows(i, *k) for i, k in self.pairs])
        slice_cols = ["x_Provider", "BillingAccountId", "BillingPeriodStart"]
        df = self.lines.where(cond).select("_ba_delivery", *slice_cols, _content_key().alias("h"), "BilledCost",
                                           "BillingCurrency", export.alias("export"))
        df = df.withColumn("exports", F.size(F.collect_set("export").over(Window.partitionBy(*slice_cols, "h"))))
        try:
            rows = (df.where(F.col("exports") > 1).groupBy("_ba_delivery", *slice_cols, "h")
                    .agg(F.count(F.lit(1)).alias("n"), F.first("BilledCost").alias("c"),
                         F.first("BillingCurrency").alias("cur")).collect())
        except Exception as e:  # noqa: BLE001 - a value a mapping refused
            raise input_error(e) from None
        self.counts = {}
        for r in rows:
            k = (int(r["_ba_delivery"]), (r["x_Provider"], r["BillingAccountId"], r["BillingPeriodStart"]))
            self.counts.setdefault(k, {})[int(r["h"])] = (int(r["n"]), r["c"], r["cur"])
        return self.counts

    def _left(self, s: Slice) -> dict[int, tuple[int, Any, Any]]:
        """The slice's shared contents still in it: content key -> (lines, cost, currency)."""
        return {h: (n - s.gone.get(h, 0), c, cur) for h, (n, c, cur) in self._load().get((s.delivery, s.key), {}).items()
                if n > s.gone.get(h, 0)}

    def settle(self, d: RawDelivery, s: Slice, owners: dict[tuple[str, str, str | None, Any],
                                                          tuple[RawDelivery, Slice]]) -> int:
        """Settle the slice ``s`` of delivery ``d`` with the other exports' current deliveries of its slice (in
        ``owners``, which loses those left with no line); returns the lines ``s`` keeps (0: set aside)."""
        if s.key not in self.shared_keys:
            return s.left
        others = sorted(((od, os) for (export, *k), (od, os) in owners.items()
                         if tuple(k) == s.key and export != d.delivery.export), key=lambda o: o[0].index)
        prov, acct, period = s.key
        month = f"{period + timedelta(days=14):%Y-%m}" if period else "?"
        for od, os in others:
            mine, theirs = self._left(s), self._left(os)
            both = {h: min(v[0], theirs[h][0]) for h, v in mine.items() if h in theirs}
            n_shared = sum(both.values())
            if n_shared == 0:
                continue
            costs = [mine[h][1] * n for h, n in both.items() if mine[h][1] is not None]
            currencies = ",".join(sorted({str(mine[h][2]) for h in both if mine[h][2] is not None}))
            cost = f"{sum(costs):,.2f} {currencies}" if costs else "no cost"
            dv, ov = d.delivery, od.delivery
            what = (f"exports {dv.export!r} and {ov.export!r} deliver {n_shared:,} of the same lines ({cost}) for "
                    f"{prov} account {acct} {month}")
            if self.policy.keep == "both":
                self.notes.append(f"{what}: both counted ([exports] keep = \"both\")")
                continue
            rank, orank = (self.policy.rank(dv.export), -s.left), (self.policy.rank(ov.export), -os.left)
            new_wins = rank < orank or (rank == orank and dv.order >= ov.order)
            why = "listed first in [exports] prefer" if rank[0] != orank[0] else (
                "more lines" if s.left != os.left else "newer delivery")
            loser = os if new_wins else s
            for h, n in both.items():
                loser.gone[h] = loser.gone.get(h, 0) + n
            self.rows += n_shared
            kept_name, lost_label = (dv.export, ov.label) if new_wins else (ov.export, dv.label)
            rest = (f"every line of {lost_label} for that period is in {kept_name!r}: it is set aside" if loser.left == 0
                    else f"{lost_label} keeps its {loser.left:,} other lines")
            self.notes.append(f"{what}: counted once, in {kept_name!r} ({why}); {rest} "
                              "(choose with [exports] prefer or keep in the config)")
            if new_wins and os.left == 0:
                owners.pop((ov.export, *os.key))
                self.set_aside.append(os)
        if s.left == 0:
            self.set_aside.append(s)
        return s.left


def input_error(e: Exception) -> BillingAuditError:
    found = refusal(str(e))
    return found or BillingAuditError(f"Spark could not read the export files: {_reason(e)}")


def _slice_rows(delivery: int, provider: str, account: str | None, period: Any) -> Any:
    """The condition selecting a delivery's lines of one slice."""
    from pyspark.sql import functions as F  # noqa: N812

    start = F.lit(None).cast("timestamp") if period is None else F.lit(
        period.strftime("%Y-%m-%d %H:%M:%S")).cast("timestamp")
    return ((F.col("_ba_delivery") == delivery) & F.col("x_Provider").eqNullSafe(F.lit(provider))
            & F.col("BillingAccountId").eqNullSafe(F.lit(account).cast("string"))
            & F.col("BillingPeriodStart").eqNullSafe(start))


def kept_lines(lines: Any, kept: Kept, partitions: int | None = None) -> Any:
    """The lines of the kept slices only, without ``_ba_delivery``; of a slice an overlap cut, the lines another
    export counts left out (of each content, the first by source file and row, as the store drops them); in
    `partitions` partitions when given (:func:`connectors.spark.engine.partitions_for`: a file is one partition or
    a few, too few for its lines)."""
    from functools import reduce

    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812

    if not kept.kept:
        raise BillingAuditError("the export files hold no lines")
    whole = [s for s in kept.kept if not s.gone]
    frames = [lines.where(reduce(lambda a, b: a | b, [_slice_rows(s.delivery, *s.key) for s in whole]))] if whole else []
    spark = lines.sparkSession
    for s in kept.kept:
        if not s.gone:
            continue
        cut = F.broadcast(spark.createDataFrame([(h, n) for h, n in s.gone.items()], "_ba_h BIGINT, _ba_cut BIGINT"))
        rn = F.row_number().over(Window.partitionBy("_ba_h").orderBy("x_SourceFile", "x_SourceRow"))
        part = lines.where(_slice_rows(s.delivery, *s.key)).withColumn("_ba_h", _content_key()).withColumn("_ba_rn", rn)
        frames.append(part.join(cut, "_ba_h", "left").where(F.col("_ba_rn") > F.coalesce(F.col("_ba_cut"), F.lit(0)))
                      .drop("_ba_h", "_ba_rn", "_ba_cut"))
    out = reduce(lambda a, b: a.unionByName(b), frames).drop("_ba_delivery")
    # by the line's id (unique: even partitions), not round robin: a round-robin repartition sorts every row first
    # (spark.sql.execution.sortBeforeRepartition, so that a retried task deals the same rows), and that sort of
    # wide rows ran the executor out of memory on GCP's 1M-line export with a 2 GiB driver
    return out if partitions is None else out.repartition(partitions, "x_LineItemId")


def refuse_errors(p: Plan) -> None:
    """Every file the raw path cannot read, in one error (nothing is audited without them, nothing skipped)."""
    errors = [*p.errors, *(d.error for d in p.deliveries if d.error is not None)]
    if errors:
        shown = "\n".join(f"  {e}" for e in errors[:20])
        more = f"\n  ... and {len(errors) - 20} more" if len(errors) > 20 else ""
        raise BillingAuditError(f"--source raw: {len(errors)} file(s) cannot be read on Spark (nothing was audited):"
                                f"\n{shown}{more}")


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def describe(p: Plan, kept: Kept | None) -> str:
    """The dry run: each delivery, whether it is kept, superseded (per slice) or refused, its files and sizes."""
    mine: dict[int, list[str]] = {}
    gone: dict[int, list[str]] = {}
    aside: dict[int, list[str]] = {}
    if kept is not None:
        for s in kept.kept:
            mine.setdefault(s.delivery, []).append(_slice_name(s))
        for s in kept.superseded:
            gone.setdefault(s.delivery, []).append(_slice_name(s))
        for s in kept.overlapped:
            aside.setdefault(s.delivery, []).append(_slice_name(s))
    out = []
    total = 0
    for d in p.deliveries:
        dv = d.delivery
        if d.error is not None:
            status = f"refused: {d.error}"
        elif kept is None:
            status = "would read"
        else:
            status = _status([(mine, "kept", "kept for"), (gone, "superseded by a newer delivery", "superseded for"),
                              (aside, "set aside, every line counted in another export", "set aside for")], d.index)
        size = d.size
        total += size if d.error is None else 0
        out.append(f"{dv.label}  [{dv.export or dv.key}; dated {dv.version:%Y-%m-%d %H:%M} by {dv.version_source}; "
                   f"{len(dv.files)} file(s), {_size(size)}]\n    {status}")
        for f in d.files:
            out.append(f"    {f.display}  {f.format}  {_size(f.size)}")
    for e in p.errors:
        out.append(f"{e.file}\n    refused: {e.reason}")
    for ev in p.events:
        out.append(f"{reader.display_name(ev)}\n    interruption events: read on the driver into the store  "
                   f"{_size(ev.stat().st_size)}")
    out.extend(f"note: {told}" for told in (kept.notes if kept is not None else []))
    out.append(f"{len(p.readable)} of {len(p.deliveries)} deliveries readable, {_size(total)} to read")
    return "\n".join(out)


def _status(kinds: list[tuple[dict[int, list[str]], str, str]], index: int) -> str:
    """What became of a delivery's slices: ``kept: ...`` when all are one way, else ``kept for ...; superseded for
    ...``."""
    mine = [(names[index], alone, mixed) for names, alone, mixed in kinds if index in names]
    if not mine:
        return "superseded by a newer delivery: no lines"
    if len(mine) == 1:
        return f"{mine[0][1]}: {', '.join(sorted(mine[0][0]))}"
    return "; ".join(f"{mixed} {', '.join(sorted(names))}" for names, _, mixed in mine)


def _slice_name(s: Slice) -> str:
    month = f"{s.period:%Y-%m}" if s.period is not None else "no period"
    cut = f", {s.lines - s.left:,} of them counted in another export" if s.left != s.lines and s.left else ""
    return f"{s.provider} {s.account} {month} ({s.lines:,} lines{cut})"


# -- the kept lines written back: the layout of `billing-audit lines-export` ----------------------------------------
def _period_column() -> Any:
    """``billing_period`` as the store's ``strftime(PERIOD, '%Y-%m')`` (:data:`billing_audit.store.PERIOD`)."""
    from pyspark.sql import functions as F  # noqa: N812

    return F.date_format(F.date_trunc("month", F.col("BillingPeriodStart") + F.expr("INTERVAL 14 DAYS")), "yyyy-MM")


@dataclass
class LinesTarget:
    """Where ``--spark-write-lines`` writes: the URI, its Hadoop file system and path (checked before any work)."""

    uri: str
    fs: Any
    path: Any
    hpath: Any  # org.apache.hadoop.fs.Path


def lines_target(spark: Any, uri: str) -> LinesTarget:
    """The folder the kept lines go to, refused before anything is read when it is not empty and not written by
    billing-audit (its marker file), as ``billing-audit lines-export`` refuses it."""
    from billing_audit.engines import LINES_MARKER

    jvm = spark.sparkContext._jvm  # noqa: SLF001 - Hadoop's FileSystem: the one API every Spark URI has
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001
    hpath = jvm.org.apache.hadoop.fs.Path
    try:  # a local folder made absolute: the JVM's working folder is where it started, not ours
        target = hpath(uri if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", uri) else str(Path(uri).resolve()))
        fs = target.getFileSystem(conf)
        busy = fs.exists(target) and len(fs.listStatus(target)) > 0
        ours = fs.exists(hpath(target, LINES_MARKER))
    except Exception as e:  # noqa: BLE001 - py4j's error: no such file system, or not reachable
        raise BillingAuditError(f"--spark-write-lines {uri}: Spark cannot write there: {_reason(e)}") from None
    if busy and not ours:
        raise BillingAuditError(f"--spark-write-lines {uri}: not empty and not written by billing-audit; choose "
                                "another folder (nothing was audited)")
    return LinesTarget(uri, fs, target, hpath)


def write_lines(frame: Any, to: LinesTarget, n: int) -> None:
    """The kept lines as ``billing-audit lines-export`` writes the store's (:func:`billing_audit.engines.write_lines`):
    parquet partitioned by ``x_Provider`` and ``billing_period``, money DECIMAL(38,12), times without a time zone (as
    the store holds them), the marker file naming the lines' number; ``x_IngestId`` is 0 (nothing was ingested).
    Written to ``URI.partial`` first, then put in place (:func:`lines_target` checked the folder): one this wrote
    before is replaced whole.  Any URI Spark's file systems write (a local folder, ``s3a://``, ``abfss://``)."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import TimestampType

    from billing_audit.engines import LINES_MARKER

    def column(name: str, typ: Any) -> Any:
        c = F.col(f"`{name}`")
        if isinstance(typ, TimestampType):
            return c.cast("timestamp_ntz").alias(name)
        return c.cast("bigint").alias(name) if name == "x_IngestId" else c

    fs = to.fs
    partial = to.hpath(to.path.getParent(), to.path.getName() + ".partial")
    out = frame.select(*[column(f.name, f.dataType) for f in frame.schema.fields], _period_column().alias("billing_period"))
    try:
        fs.delete(partial, True)
        out.write.partitionBy("x_Provider", "billing_period").parquet(partial.toString())
        marker = fs.create(to.hpath(partial, LINES_MARKER), True)
        try:
            marker.write(f"{n} canonical line items\n".encode())
        finally:
            marker.close()
        if fs.exists(to.path):
            fs.delete(to.path, True)
        renamed = fs.rename(partial, to.path)
    except Exception as e:  # noqa: BLE001 - the write failed (the lines were read already: not a value refused)
        raise BillingAuditError(f"--spark-write-lines {to.uri}: writing the lines failed: {_reason(e)}") from None
    if not renamed:
        raise BillingAuditError(f"--spark-write-lines {to.uri}: the lines are written in {partial.toString()} but "
                                "could not be put in place")
