"""User-facing errors: the CLI prints these as one line instead of a traceback."""


class JudgekitError(Exception):
    """An error caused by the user's input (bad path, incompatible models, parameter out of range)."""
