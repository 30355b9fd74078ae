"""``python -m billing_audit.cli``."""

from billing_audit.cli import run

run()
