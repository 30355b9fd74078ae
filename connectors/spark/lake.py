"""Lake URIs for ``--source raw``: the export files under ``s3a://``, ``abfss://``, ``gs://`` (any file system
Spark's Hadoop configuration reads, ``file://`` included), listed and read through that same file system.

The driver needs each file's bytes once, as local ingest does: to group the files into deliveries (manifests,
folder layouts, event and price files recognised from their content), to fingerprint them (the sha256 in every
line id) and to take their columns and types.  :func:`stage` copies every file the local walk would consider
(data files, manifests, tarballs, ``.gz`` event files) through ``FileSystem.copyToLocalFile`` into a temporary
folder that mirrors the URI's path (``s3a://bucket/cur/x/BILLING_PERIOD=2026-10/f.parquet`` ->
``TMP/0/cur/x/BILLING_PERIOD=2026-10/f.parquet``: hive partitions and folder stamps read as locally), each
with the object's modification time (the last tie-break between deliveries, as locally) and shown by its URI in
``x_SourceFile``, errors and the dry run.  The planning then runs over the copies exactly as over a local folder
(:func:`connectors.spark.raw.plan`), and the executors read each file from the lake, not from the copy, which the
plan deletes once the file is mapped (so the driver's disk holds the staged files only while they are planned).
A ``file://`` file is shown by its path, so a run over ``file:///data/exports`` is the run over ``/data/exports``.

Each scheme needs its Hadoop connector on the cluster (``s3a``: hadoop-aws and the AWS SDK bundle of the same
Hadoop version; ``abfss``/``abfs``/``wasbs``: hadoop-azure; ``gs``: the GCS connector); without it the run stops
before any work, naming the scheme and the jar.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from billing_audit import formats as fm
from billing_audit import reader
from billing_audit.errors import BillingAuditError, InputError

CONNECTORS = {
    "s3a": "hadoop-aws with the AWS SDK bundle of the same Hadoop version (org.apache.hadoop:hadoop-aws)",
    "s3": "on EMR, EMRFS (built in); elsewhere use s3a:// with hadoop-aws",
    "s3n": "use s3a:// with hadoop-aws",
    "abfs": "hadoop-azure (org.apache.hadoop:hadoop-azure)",
    "abfss": "hadoop-azure (org.apache.hadoop:hadoop-azure)",
    "wasb": "hadoop-azure (org.apache.hadoop:hadoop-azure)",
    "wasbs": "hadoop-azure (org.apache.hadoop:hadoop-azure)",
    "gs": "the GCS connector (com.google.cloud.bigdataoss:gcs-connector, hadoop3)",
}


def scheme(uri: str) -> str:
    return uri.split(":", 1)[0].lower()


def wanted(name: str, manifests: list[fm.ManifestReader]) -> bool:
    """A file the local walk would consider (:func:`billing_audit.deliveries.walk`): data files, manifests,
    tarballs, ``.gz`` files (interruption events are recognised from their content)."""
    p = Path(name)
    return (reader.is_data_file(p) or reader.is_tarball(p) or name.lower().endswith(".gz")
            or any(r.matches(p) for r in manifests))


@dataclass
class Staged:
    """The staged copies: the local folder standing for each URI, and for each copy the URI Spark reads."""

    roots: list[Path] = field(default_factory=list)
    reads: dict[str, str] = field(default_factory=dict)  # str(local copy) -> the URI the executors read
    sizes: dict[str, int] = field(default_factory=dict)  # str(local copy) -> its size

    def source(self, local: Path) -> str | None:
        return self.reads.get(str(local))


def _java_error(e: Exception) -> tuple[str, str]:
    """A py4j error's Java class and message (``("", str(e))`` for anything else)."""
    j = getattr(e, "java_exception", None)
    if j is None:
        return "", str(e)
    return str(j.getClass().getName()), str(j.getMessage() or "")


def _refused(uri: str, e: Exception) -> BillingAuditError:
    cls, msg = _java_error(e)
    first = msg.strip().splitlines()[0] if msg.strip() else cls or str(e)
    # no connector: the scheme unknown, or known to Hadoop's defaults (s3a, abfss) with its class not on the classpath
    if (cls.endswith("UnsupportedFileSystemException") or "No FileSystem for scheme" in msg
            or ("ClassNotFoundException" in msg and "FileSystem" in msg)):
        need = CONNECTORS.get(scheme(uri), "the Hadoop connector for that scheme")
        return BillingAuditError(f"{uri}: Spark has no file system for {scheme(uri)}:// here: it needs {need} on the "
                                 "driver's and executors' classpath (spark.jars.packages or the cluster's image); "
                                 "nothing was audited")
    if cls.endswith("FileNotFoundException"):
        return BillingAuditError(f"--spark-raw: no such file or folder: {uri} (nothing was audited)")
    return BillingAuditError(f"{uri}: cannot be listed or read through Spark's file system ({cls or 'error'}: "
                             f"{first}); nothing was audited")


def _mirror(root: Path, path: str) -> Path:
    """Where a file of the URI's path lands under ``root``: its whole path, so that the folders above the URI
    (hive partitions, stamps) read as they do locally."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    return root.joinpath(*parts)


def stage(spark: Any, uris: list[str], stack: ExitStack) -> Staged:
    """Copy the files under each URI that the planning reads into a temporary folder (removed when ``stack``
    closes); their display names are their URIs (``file://``: their paths)."""
    jvm = spark._jvm  # noqa: SLF001 - the Hadoop file system API is the JVM's
    conf = spark._jsc.hadoopConfiguration()  # noqa: SLF001
    tmp = Path(tempfile.mkdtemp(prefix="ba-lake-"))
    out = Staged()
    manifests = fm.manifest_readers()

    def cleanup() -> None:
        for k in out.reads:
            reader.forget_display(k)
        shutil.rmtree(tmp, ignore_errors=True)

    stack.callback(cleanup)
    for i, uri in enumerate(uris):
        try:
            base = jvm.org.apache.hadoop.fs.Path(uri)
            fs = base.getFileSystem(conf)
            status = fs.getFileStatus(base)
            files = []
            if status.isFile():
                files.append(status)
            else:
                it = fs.listFiles(base, True)
                while it.hasNext():
                    files.append(it.next())
        except Exception as e:  # noqa: BLE001 - py4j's Py4JJavaError: the scheme, the URI, the credentials
            raise _refused(uri, e) from None
        root = tmp / str(i)
        qualified = fs.makeQualified(base)
        local_base = _mirror(root, str(qualified.toUri().getPath()))
        out.roots.append(local_base)
        (local_base.parent if status.isFile() else local_base).mkdir(parents=True, exist_ok=True)
        for st in files:
            src = st.getPath()
            name = str(src.getName())
            if not wanted(name, manifests):
                continue
            path = str(src.toUri().getPath())
            dst = _mirror(root, path)
            dst.parent.mkdir(parents=True, exist_ok=True)
            location = str(src.toString())
            try:
                fs.copyToLocalFile(False, src, jvm.org.apache.hadoop.fs.Path("file", None, str(dst)), True)
            except Exception as e:  # noqa: BLE001 - py4j's Py4JJavaError
                cls, msg = _java_error(e)
                raise InputError(location, f"cannot be read through Spark's file system ({cls}: {msg.strip()[:300]})"
                                 ) from None
            t = int(st.getModificationTime()) / 1000
            os.utime(dst, (t, t))
            display = path if scheme(location) == "file" else location
            reader.show_as(dst, display)
            out.reads[str(dst)] = location
            out.sizes[str(dst)] = int(st.getLen())
    return out
