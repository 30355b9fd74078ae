"""Run one untrusted rule in a child process with its memory, time and disk bounded; write its hits aside.

The parent (:func:`billing_audit.tagging.run_user_rule`) starts ``python -I rulebox.py`` (this file by path, so
only the standard library and duckdb are imported), writes a JSON spec on its stdin and waits, at most the rule's
timeout.  Here:

1. ``RLIMIT_AS`` caps the process's address space (``mem_bytes``): DuckDB's own limit bounds its buffer pool, but
   string functions (``repeat``, ``lpad``, ...) allocate outside it; past the cap an allocation fails and DuckDB
   raises an out-of-memory error, which is reported, not fatal for the parent.
2. An in-memory DuckDB attaches the store READ_ONLY and offers the rule only ``line_items`` (a view) and
   ``checkpoint_resources`` (a table): no other store table is visible by an unqualified name, and the checker
   refuses qualified names.  A second attached file receives the hits.  Then external access is disabled and the
   configuration locked; spilling goes to ``temp_dir``, at most ``max_temp`` bytes.
3. The rule's query is bound and run (binding is inside the bound too), its ``reason`` cut at ``REASON_CHARS``.
4. ``result.json`` says ``{"ok": true, "rows": n}`` or ``{"ok": false, "error": ..., "kind": "oom"|"error"}``.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

REASON_CHARS = 1000


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def run(spec: dict[str, Any]) -> dict[str, Any]:
    mem = int(spec["mem_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    import duckdb

    try:
        con = duckdb.connect(":memory:", config={
            "threads": int(spec["threads"]), "memory_limit": spec["memory_limit"],
            "temp_directory": spec["temp_dir"], "max_temp_directory_size": spec["max_temp"],
        })
        deadline = time.monotonic() + float(spec["lock_timeout"])
        while True:
            try:
                con.execute(f"ATTACH {_lit(spec['store'])} AS ba_store (READ_ONLY)")
                break
            except duckdb.Error as e:
                if "lock" not in str(e).lower() or time.monotonic() >= deadline:
                    return {"ok": False, "kind": "store", "error": f"cannot open the store: {e}"}
                time.sleep(0.2)
        con.execute(f"ATTACH {_lit(spec['out'])} AS ba_out")
        con.execute("CREATE TABLE ba_out.hits (x_LineItemId VARCHAR, reason VARCHAR)")
        con.execute("SET TimeZone = 'UTC'")
        con.execute("USE memory")
        con.execute("CREATE VIEW line_items AS SELECT * FROM ba_store.main.line_items")
        con.execute(f"CREATE TABLE checkpoint_resources AS {spec['checkpoint_sql']}")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except duckdb.Error as e:
        return {"ok": False, "kind": "setup", "error": str(e)}
    try:
        n = con.execute(
            "INSERT INTO ba_out.hits SELECT DISTINCT CAST(x_LineItemId AS VARCHAR), "
            f"left(CAST(reason AS VARCHAR), {REASON_CHARS}) FROM ({spec['sql']}) AS rule_output "
            "WHERE x_LineItemId IS NOT NULL", spec["params"]).fetchone()
    except duckdb.OutOfMemoryException as e:
        return {"ok": False, "kind": "oom", "error": str(e).splitlines()[0]}
    except duckdb.Error as e:
        return {"ok": False, "kind": "error", "error": str(e)}
    except MemoryError:
        return {"ok": False, "kind": "oom", "error": "out of memory"}
    con.close()
    return {"ok": True, "rows": int(n[0]) if n else 0}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    try:
        result = run(spec)
    except MemoryError:
        result = {"ok": False, "kind": "oom", "error": "out of memory"}
    with open(spec["result"], "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
