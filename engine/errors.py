"""The errors the engine raises. Every one carries a message a user can act on; the CLI and the
app show it as one line, never a traceback. They sit at the bottom of the import graph so that
analysis, registry, fetch and the app can import them without importing a model family."""
from __future__ import annotations


class EngineError(Exception):
    """An error with a message a user can act on; the CLI and UI show it as one line."""


class ModelUnavailable(EngineError):
    """The model cannot be loaded here (offline, missing file, not allowed path)."""


class NeedsDownload(ModelUnavailable):
    """The model's files are not on this machine and must be downloaded first: the app offers
    the download where this is raised, whatever the message says."""


class UnsupportedPrediction(EngineError):
    """The model lacks the head a prediction needs (e.g. no masked-LM head)."""
