"""Every exception the CLI can anticipate, as the lines a person reads on stderr.

Modelled on huggingface_hub's `cli/_errors.py`: a table maps exception types to one-line
messages, the group prints them as `error: ...` and exits non-zero, and anything not in the
table is a bug that keeps its traceback. TrtSpecError already carries its problem and fix; click's
usage errors (bad option, missing argument, bad choice, unknown command) are rewritten into the
same `problem; fix` form; operating-system errors on the user's paths (missing directory,
permission denied, disk full) name the path. With TRTSPEC_DEBUG=1 the group re-raises instead,
so the traceback shows.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import click

from trtspec.errors import TrtSpecError

DEBUG_HINT = "TRTSPEC_DEBUG=1 shows the traceback"


class CliError(click.ClickException):
    """An anticipated failure, shown as one `error: ...` line per problem (no usage banner)."""

    def __init__(self, lines: list[str], exit_code: int):
        super().__init__("\n".join(lines))
        self.lines = lines
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        for line in self.lines:
            click.secho(f"error: {line}", fg="red", err=True)


def _sentence(text: str) -> str:
    """click's "No such option '--x'." as "no such option '--x'" (our lines are lower-case clauses)."""
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:]


def _command_path(ctx: click.Context | None) -> str:
    """`trtspec generate`, whatever name the program was started under (`python -c`, CliRunner)."""
    names = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(["trtspec", *reversed(names)])


def usage_line(error: click.UsageError) -> str:
    """One `problem; fix` line for any click usage error."""
    see_help = f"see '{_command_path(error.ctx)} --help'"
    if isinstance(error, click.NoSuchOption | click.exceptions.NoSuchCommand):
        # click lists every close match, best first (difflib); the best one is the useful hint
        # ('--temprature' also came close to generate's '--compare')
        possibilities = error.possibilities or []
        fix = f"did you mean {possibilities[0]!r}?" if possibilities else see_help
        return f"{_sentence(error.message)}; {fix}"
    if isinstance(error, click.BadParameter) and not isinstance(error, click.MissingParameter) and error.param:
        hint = error.param_hint or error.param.get_error_hint(error.ctx)
        hint = " / ".join(hint) if isinstance(hint, list | tuple) else hint
        message = _sentence(error.message)
        # A message that carries its own fix (`...; 1 turns it off`) needs no pointer to --help.
        return f"{hint.replace(chr(39), '')}: {message}" + ("" if "; " in message else f"; {see_help}")
    return f"{_sentence(error.format_message())}; {see_help}"


def _os_line(error: OSError) -> str | None:
    where = f"{error.filename}: " if error.filename else ""
    reason = (error.strerror or str(error)).lower()
    if isinstance(error, FileNotFoundError):
        fix = "check the path (a directory on it does not exist; create it first)"
    elif isinstance(error, PermissionError) or error.errno == errno.EROFS:
        fix = "choose a writable location or fix its permissions"
    elif isinstance(error, IsADirectoryError):
        fix = "give a file, not a directory"
    elif isinstance(error, NotADirectoryError):
        fix = "a part of the path is a file; check the path"
    elif error.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free some disk space (or point the output elsewhere)"
    elif isinstance(error, ConnectionError):
        fix = "is the server running? `trtspec deploy status` says"
    elif error.filename:
        fix = "check the path"
    else:
        return None  # an OSError with nothing to name is not a user mistake we can explain
    return f"{where}{reason}; {fix} ({DEBUG_HINT})"


def _unicode_line(error: UnicodeDecodeError) -> str:
    return (f"a file is not UTF-8 text ({error.reason} at byte {error.start}); save it as UTF-8 "
            f"({DEBUG_HINT} to see which)")


# Most specific first: the first type that matches formats the error.
KNOWN_ERRORS: list[tuple[type[BaseException], Callable[[BaseException], str | None]]] = [
    (UnicodeDecodeError, _unicode_line),
    (OSError, _os_line),
    (MemoryError, lambda e: f"out of memory; use a smaller model, batch or sequence length ({DEBUG_HINT})"),
]


def as_cli_error(error: BaseException) -> CliError | None:
    """The one-line form of an anticipated exception; None for a bug (it keeps its traceback)."""
    if isinstance(error, CliError):
        return error
    if isinstance(error, TrtSpecError):
        return CliError(str(error).splitlines(), error.exit_code)
    if isinstance(error, click.UsageError):
        return CliError([usage_line(error)], error.exit_code)
    if isinstance(error, click.ClickException):
        return CliError([_sentence(error.format_message())], error.exit_code)
    for kind, describe in KNOWN_ERRORS:
        if isinstance(error, kind):
            line = describe(error)
            return CliError([line], 1) if line else None
    return None
