"""The built wheel carries the built-in rules with their case files, and `rules test` runs them from an install.

The wheel is built from this checkout offline (hatchling from the venv, no build isolation),
installed with --target into a temp folder, and run with PYTHONPATH pointing there and an empty
working directory, so the code and the rules come from the install, not from the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = next(q for q in Path(__file__).resolve().parents if (q / 'pyproject.toml').is_file())
RULES_DIR = ROOT / "rules"

pytestmark = pytest.mark.slow


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist), str(ROOT)])
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = dist.glob("billing_audit-*.whl")
    site = tmp / "site"
    r = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)])
    assert r.returncode == 0, r.stdout + r.stderr
    cwd = tmp / "empty"
    cwd.mkdir()
    return {"wheel": wheel, "site": site, "cwd": cwd}


def _env(site: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "BILLING_AUDIT_DB")}
    env["PYTHONPATH"] = str(site)
    env["NO_COLOR"] = "1"
    return env


def _checkout_cases() -> list[Path]:
    cases = sorted(RULES_DIR.glob("*.cases.yaml"))
    assert cases, f"no case files in {RULES_DIR}"
    return cases


def test_wheel_ships_the_case_files_beside_the_rules(installed: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for p in sorted(RULES_DIR.glob("*.sql")) + _checkout_cases():
        assert f"billing_audit/_rules/{p.name}" in names, f"{p.name} missing from {installed['wheel'].name}"
    assert not any("rule_cases" in n for n in names)


def test_rules_test_runs_the_builtin_cases_from_an_installed_wheel(installed: dict[str, Path]) -> None:
    site, cwd = installed["site"], installed["cwd"]
    probe = _run([sys.executable, "-c", "import billing_audit, billing_audit.rules as r; print(billing_audit.__file__); print(r.builtin_dir())"],
                 cwd=cwd, env=_env(site))
    assert probe.returncode == 0, probe.stderr
    module_file, rules_dir = (Path(line) for line in probe.stdout.splitlines())
    assert module_file.resolve().is_relative_to(site.resolve()), module_file
    assert rules_dir.resolve() == (site / "billing_audit" / "_rules").resolve(), rules_dir

    r = _run([sys.executable, "-c", "from billing_audit.cli import main; main()", "rules", "test"], cwd=cwd, env=_env(site))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and "no case file" not in r.stdout, r.stdout

    cases = _checkout_cases()
    n_rules = len(list(RULES_DIR.glob("*.sql")))
    lines = r.stdout.splitlines()
    rows = 0
    for p in cases:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
        match, no_match = len(data.get("match") or []), len(data.get("no_match") or [])
        rows += match + no_match
        (line,) = [line for line in lines if line.startswith(f"ok   {data['rule']} ")]
        assert line.endswith(f": {match} match, {no_match} near misses"), (p.name, line)
    assert lines[-1] == f"{n_rules} rules checked, {len(cases)} case files, {rows} case rows run", r.stdout
