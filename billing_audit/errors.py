"""Errors that the CLI turns into one clear message and exit code 2."""

from __future__ import annotations


class BillingAuditError(Exception):
    """Base class: a problem the user can fix (bad input, bad option)."""

    exit_code = 2


class InputError(BillingAuditError):
    """A file that cannot be read: names the file and, where known, row and column."""

    def __init__(self, file: str, message: str, row: int | None = None, column: str | None = None):
        self.file = file
        self.row = row
        self.column = column
        self.reason = message
        where = file
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {message}")


class UnknownFormatError(InputError):
    pass
