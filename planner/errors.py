"""Typed errors shared by every layer.

Every error carries one line that names the thing (a file, a snapshot id, an option) and
the problem, so the CLI can print it as-is and exit with status 2 instead of a traceback.
"""


class MeltwaterError(Exception):
    """Base of all errors meltwater raises on bad input or an unreadable table."""

    exit_code = 2
