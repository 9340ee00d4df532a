"""Errors a person can act on.

Every error trtspec raises on purpose is a TrtSpecError: one line that says what was wrong and
what to do. The CLI prints `str(error)` and exits with `error.exit_code`; a traceback is shown
only with TRTSPEC_DEBUG=1. Use `assert` only for internal invariants, never for user input.
"""

from __future__ import annotations


class TrtSpecError(Exception):
    """Base class: a problem the user can fix. The message names the problem and the fix."""

    exit_code = 1

    def __init__(self, message: str, *, fix: str | None = None):
        self.problem = message
        self.fix = fix
        super().__init__(f"{message}; {fix}" if fix else message)


class SpecError(TrtSpecError):
    """The spec file or a flag is invalid. `problems` holds one `field.path: message` per line."""

    exit_code = 2

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ModelSourceError(TrtSpecError):
    """A model source is missing, corrupt, or not a causal LM."""


class IncompatibleArtifactError(TrtSpecError):
    """Two artifacts do not belong together (a draft made for another target, a stale engine)."""


class ToolMissingError(TrtSpecError):
    """An external tool (trtllm-build, tritonserver, docker) is not available here."""


class SubprocessError(TrtSpecError):
    """An external command failed; the message carries the tail of its stderr."""


class ServerError(TrtSpecError):
    """The Triton server could not be started, reached or stopped."""
