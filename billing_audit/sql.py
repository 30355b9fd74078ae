"""The one owner of SQL quoting: string literals and identifiers spliced into generated SQL.

Only names and paths the tool itself chose, or that name a column, are spliced; user data reaches SQL as
bound parameters.  Both forms read the same in DuckDB, Spark SQL, BigQuery (standard SQL) and Trino/Athena.

>>> lit("O'Brien"), lit(None), ident('weird"col')
("'O''Brien'", 'NULL', '"weird""col"')
"""

from __future__ import annotations


def lit(value: str | None) -> str:
    """A SQL string literal (or NULL)."""
    return "NULL" if value is None else "'" + value.replace("'", "''") + "'"


def ident(name: str) -> str:
    """A double-quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'
