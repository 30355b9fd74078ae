"""Issue #15 item 9b: a cloud SDK's configuration error (no region, no or partial credentials, an unknown profile,
no Java for Spark) is one clear line and exit code 2, never a traceback.

Each case runs the real command in a fresh process with the real SDKs and an empty environment: no AWS_*,
AZURE_* or GOOGLE_* variables, HOME a temporary folder (so no ~/.aws, ~/.azure or gcloud configuration), only
what a case sets.  Nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(tmp_path: Path, *args: str, **env: str) -> tuple[int, list[str]]:
    """Exit code and the lines on stderr."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if args and args[0] in ("report", "tag"):  # read commands refuse a missing store before any engine runs
        import billing_audit

        billing_audit.open(tmp_path / "s.duckdb").close()
    clean = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", **env}
    p = subprocess.run([sys.executable, "-m", "billing_audit.cli", *args, "--db", str(tmp_path / "s.duckdb")],
                       capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=300)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    return p.returncode, p.stderr.splitlines()


ATHENA = ("report", "--engine", "athena", "--athena-table", "cur_db.cur2_export", "--period", "2026-10")
NO_AWS_CREDENTIALS = ("no AWS credentials found: set AWS_PROFILE or --aws-profile, AWS_ACCESS_KEY_ID/"
                      "AWS_SECRET_ACCESS_KEY, run `aws sso login`, or run where an instance/container role is attached")


def test_athena_without_a_region(tmp_path: Path) -> None:
    assert run(tmp_path, *ATHENA) == (2, ["error: --engine athena: no AWS region: pass --aws-region or set AWS_REGION"])


@pytest.mark.parametrize("how", ["flag", "AWS_REGION", "AWS_DEFAULT_REGION"])
def test_athena_with_a_region_but_no_credentials(tmp_path: Path, how: str) -> None:
    flags, env = (("--aws-region", "eu-west-1"), {}) if how == "flag" else ((), {how: "eu-west-1"})
    got = run(tmp_path, *ATHENA, *flags, **env)
    assert got == (2, [f"error: --engine athena: {NO_AWS_CREDENTIALS}"])


def test_athena_with_partial_credentials(tmp_path: Path) -> None:
    got = run(tmp_path, *ATHENA, AWS_REGION="eu-west-1", AWS_ACCESS_KEY_ID="AKIAEXAMPLE")
    assert got == (2, ["error: --engine athena: incomplete AWS credentials: AWS_SECRET_ACCESS_KEY is missing"])


@pytest.mark.parametrize("how", ["flag", "AWS_PROFILE"])
def test_athena_with_an_unknown_profile(tmp_path: Path, how: str) -> None:
    if how == "flag":
        got = run(tmp_path, *ATHENA, "--aws-profile", "nope", AWS_REGION="eu-west-1")
    else:
        got = run(tmp_path, *ATHENA, AWS_REGION="eu-west-1", AWS_PROFILE="nope")
    assert got == (2, ["error: --engine athena: AWS profile 'nope' is not in the AWS config or credentials file"])


def test_pull_aws_without_credentials_or_with_an_unknown_profile(tmp_path: Path) -> None:
    pull = ("pull", "aws", "--bucket", "billing", "--period", "2026-10")
    code, lines = run(tmp_path, *pull)
    assert (code, lines) == (2, [f"error: {NO_AWS_CREDENTIALS.replace('--aws-profile', '--profile')}"])
    assert run(tmp_path, *pull, AWS_PROFILE="nope") == (
        2, ["error: AWS profile 'nope' is not in the AWS config or credentials file"])
    assert run(tmp_path, *pull, AWS_ACCESS_KEY_ID="AKIAEXAMPLE") == (
        2, ["error: incomplete AWS credentials: AWS_SECRET_ACCESS_KEY is missing"])


def test_pull_azure_without_credentials_is_one_line(tmp_path: Path) -> None:
    """azure-identity would log a dozen lines (every credential it tried) before the pull's own message."""
    code, lines = run(tmp_path, "pull", "azure", "--scope", "/subscriptions/0000", "--export", "gpu-daily")
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("error: no usable Azure credentials: sign in with `az login`"), lines


def test_bigquery_and_pull_gcp_without_credentials(tmp_path: Path) -> None:
    expected = ["error: no Google credentials found (application default credentials): run `gcloud auth "
                "application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or run "
                "where a service account is attached"]
    table = "billing-proj.billing_export.gcp_billing_export_v1_0123"
    assert run(tmp_path, "report", "--engine", "bigquery", "--bq-table", table, "--period", "2026-10") == (2, expected)
    assert run(tmp_path, "pull", "gcp", "--table", table, "--period", "2026-10") == (2, expected)


def test_spark_without_java(tmp_path: Path) -> None:
    code, lines = run(tmp_path, "report", "--engine", "spark", JAVA_HOME=str(tmp_path / "no-java"))
    assert code == 2
    assert lines[-1] == ("error: --engine spark: Spark's JVM did not start: it needs a Java runtime (17): "
                         "install one, or set JAVA_HOME to it"), lines
