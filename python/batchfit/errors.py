"""The exceptions the API raises, carrying the command line's own messages."""

from __future__ import annotations


class BatchfitError(Exception):
    """batchfit could not answer: the message is the command line's.

    ``exit_code`` is the binary's exit status (1: the job failed to predict,
    2: the request was malformed), ``command`` the arguments it ran with.
    """

    def __init__(self, message: str, exit_code: int = 1, command: list[str] | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.command = list(command or [])


class UsageError(BatchfitError, ValueError):
    """A bad argument: an unknown model, GPU or option, or a value out of range
    (the binary's exit status 2). A ``ValueError`` too, as Python code
    expects of a bad argument."""


class CaptureError(BatchfitError):
    """The model could not be captured (the capture module's message)."""
