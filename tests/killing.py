"""Kill -9 at a point inside a run's own work, timed from the run it interrupts, not in absolute seconds.

A kill timed in seconds stops landing mid-run once the code gets faster (the incremental tag's kills of 1.4 to
1.7 s all came after its commit once it got faster, and its test had nothing left to test) or once the machine
is faster; these helpers measure the start-up and a probe run on the machine at hand and place the kills inside
the work that follows the start-up."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Mapping

TAG_IMPORTS = "import billing_audit.app, duckdb"
PULL_IMPORTS = "import billing_audit.app, billing_audit.pulling, boto3, duckdb"


def startup(imports: str = TAG_IMPORTS) -> float:
    """Seconds a command takes before its work: the interpreter, `imports` and opening a store (the slowest of
    three, so that a kill timed past it lands in the run's own work)."""
    code = f"{imports}; duckdb.connect(':memory:').close()"
    times = []
    for _ in range(3):
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.monotonic() - t)
    return max(times)


def timed(cmd: list[str], env: Mapping[str, str] | None = None) -> float:
    """Seconds a run of `cmd` takes (it must succeed)."""
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return time.monotonic() - t


def delays(seed: int, n: int, run: float, start: float, lo: float = 0.1, hi: float = 0.6) -> list[float]:
    """n kill times inside a run measured at `run` s whose first `start` s are the start-up: between `lo` and
    `hi` of the way through its own work (hi over 1: some runs are let finish)."""
    rng = random.Random(seed)
    work = max(run - start, 0.2)
    return [start + rng.uniform(lo, hi) * work for _ in range(n)]


def kill_after(cmd: list[str], delay: float, ready: str | None = None,
               env: Mapping[str, str] | None = None) -> bool:
    """Run cmd, SIGKILL it `delay` s after it starts (or after it prints `ready` on stderr); True if it was killed."""
    # stderr read only when waiting for `ready` (a pipe nobody reads can fill and stall the run)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL if ready is None else subprocess.PIPE,
                            text=True, env=env)
    if ready is not None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if ready in line:
                break
    time.sleep(delay)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    return killed
