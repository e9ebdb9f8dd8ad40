"""The package version, alone in a module so that `judgekit --version` and the packaging read it without
importing anything else (judgekit/__init__.py exports the API lazily and must not be imported by its parts)."""

__version__ = "0.1.0"
