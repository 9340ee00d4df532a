"""The spec's problem lines and the checks that are not plain ranges.

Every spec error is one `field.path: problem (got value); fix` line (problem_line): what is
wrong and what was given first, then what to do. format_problem() turns each pydantic error into
such a line, naming the closest real key for an unknown one (`speculative.max_draft_lenn: unknown
key; did you mean max_draft_len?`) and the section a misplaced key belongs to. host_problem() and
is_loopback() check serve.host: an IP address or a name this machine resolves.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
import re
import socket
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

_NOTHING = object()


def problem_line(path: str, problem: str, got: Any = _NOTHING, fix: str | None = None) -> str:
    """`path: problem (got value); fix`, the one form of every spec error line: what is wrong and
    what was given come first, then what to do."""
    line = f"{path}: {problem}"
    if got is not _NOTHING:
        line += f" (got {got})"
    return f"{line}; {fix}" if fix else line


_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


@functools.lru_cache(maxsize=64)
def _resolve(host: str) -> tuple[str, ...]:
    try:
        return tuple(sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)}))
    except (socket.gaierror, UnicodeError, OSError):
        return ()


def host_problem(host: str) -> str | None:
    """Why `host` cannot be bound (not an IP address, not a resolvable host name); None if it can."""
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if not _HOST_NAME.fullmatch(host) or len(host) > 253:
        return "not an IP address or a host name"
    if not _resolve(host):
        return "the host name does not resolve on this machine"
    return None


def is_loopback(host: str) -> bool:
    """True when every address `host` stands for is a loopback address (127.0.0.0/8, ::1)."""
    try:
        ipaddress.ip_address(host)
        addresses: tuple[str, ...] = (host,)
    except ValueError:
        addresses = _resolve(host)
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def _section_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The section class a `loc` prefix points into (None past a list or a plain value)."""
    model = root
    for part in loc:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _sections(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every section by its dotted path ("" is the top level)."""
    found, todo = {}, [("", root)]
    while todo:
        prefix, model = todo.pop()
        found[prefix] = model
        for name, field in model.model_fields.items():
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                todo.append((f"{prefix}{name}.", field.annotation))
    return found


def _unknown_key_fix(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`did you mean max_draft_len?`, or where a misplaced key belongs, or the keys there are."""
    section, key = _section_at(root, loc[:-1]), str(loc[-1])
    keys = list(section.model_fields) if section else []
    elsewhere = [f"{prefix}{key}" for prefix, model in _sections(root).items() if key in model.model_fields]
    if elsewhere:  # the right key in the wrong section
        return f"did you mean {' or '.join(sorted(elsewhere))}?"
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    where = ".".join(str(p) for p in loc[:-1]) or "the top level"
    return f"{where} takes: {', '.join(keys)}" if keys else "remove it (trtspec spec show lists every key)"


def _literal_choices(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, ...]:
    section = _section_at(root, loc[:-1])
    field = section.model_fields.get(str(loc[-1])) if section else None
    return tuple(str(choice) for choice in typing.get_args(field.annotation)) if field else ()


def format_problem(error: Mapping[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error of validating `root` as a problem_line() (our validators' lines as is)."""
    loc = tuple(error["loc"])
    path = ".".join(str(p) for p in loc) or "spec"
    message, kind = error["msg"], error["type"]
    if kind == "value_error":
        # Our own validators already write whole problem_line() lines.
        return message.removeprefix("Value error, ")
    if kind == "extra_forbidden":
        return problem_line(path, "unknown key", fix=_unknown_key_fix(root, loc))
    fix = None
    if kind == "literal_error":
        message = message.replace("Input should be", "must be one of")
        close = difflib.get_close_matches(str(error.get("input")), _literal_choices(root, loc), n=1)
        fix = f"did you mean {close[0]}?" if close else None
    else:
        message = message.replace("Input should be", "must be")
    return problem_line(path, message, got=repr(error.get("input")), fix=fix)
