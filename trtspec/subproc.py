"""The only place in trtspec that runs a subprocess.

Every external command (pip, trtllm-build, tritonserver, docker, kubectl) goes through `run()` or
`start()`. Both take the command as a list, never a shell string, honour dry-run by printing the
command instead of running it, and turn a failure into a SubprocessError carrying the tail of
stderr so the user sees why without digging through logs.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from trtspec.errors import SubprocessError, ToolMissingError

STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class Result:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str


def format_command(command: list[str]) -> str:
    """A command line a person can paste into a shell."""
    return shlex.join(str(part) for part in command)


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(command: list[str], *, timeout: float | None = None, cwd: str | Path | None = None,
        env: dict[str, str] | None = None, dry_run: bool = False, check: bool = True) -> Result:
    """Run `command` to completion and capture its output.

    With dry_run the command is only printed. A non-zero exit raises SubprocessError (when
    check) naming the command and the last lines of its stderr.
    """
    command = [str(part) for part in command]
    if dry_run:
        print(format_command(command))
        return Result(command, 0, "", "")
    try:
        completed = subprocess.run(command, cwd=cwd, env=_merged_env(env), timeout=timeout,
                                   capture_output=True, text=True)
    except FileNotFoundError:
        raise ToolMissingError(f"{command[0]}: not found on PATH", fix="install it or use --dry-run") from None
    except subprocess.TimeoutExpired:
        raise SubprocessError(f"`{format_command(command)}` did not finish within {timeout:.0f} s") from None
    result = Result(command, completed.returncode, completed.stdout, completed.stderr)
    if check and completed.returncode != 0:
        raise SubprocessError(f"`{format_command(command)}` failed with exit code {completed.returncode}:\n"
                              f"{tail(completed.stderr or completed.stdout)}")
    return result


def run_attached(command: list[str], *, env: dict[str, str] | None = None, dry_run: bool = False) -> int:
    """Run `command` with this process's stdin/stdout/stderr (its progress shows live); return its exit code.

    For launchers whose children draw to the terminal themselves (torchrun). With dry_run the
    command is only printed and 0 returned.
    """
    command = [str(part) for part in command]
    if dry_run:
        print(format_command(command))
        return 0
    try:
        return subprocess.run(command, env=_merged_env(env), check=False).returncode
    except FileNotFoundError:
        raise ToolMissingError(f"{command[0]}: not found on PATH", fix="install it or use --dry-run") from None


def start(command: list[str], *, log_path: str | Path, cwd: str | Path | None = None,
          env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> int:
    """Start `command` in the background in its own process group, logging to log_path; return its pid.

    `pass_fds` stay open in the child (trtspec's supervisor inherits the port locks this way).
    """
    command = [str(part) for part in command]
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            process = subprocess.Popen(command, cwd=cwd, env=_merged_env(env), stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True, pass_fds=pass_fds)
        except FileNotFoundError:
            raise ToolMissingError(f"{command[0]}: not found", fix="check the installation") from None
    return process.pid


def is_running(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    except OSError:
        return True


# Seconds the rest of a stopped group gets to follow its leader before SIGKILL.
STRAGGLER_GRACE_S = 5.0


def stop(pid: int, *, timeout: float = 15.0) -> bool:
    """Stop the process group led by `pid`: SIGTERM, then SIGKILL after timeout; what is left of the
    group once the leader is gone gets SIGKILL after STRAGGLER_GRACE_S. True if the leader was running.

    Why the stragglers: tritonserver's Python stubs are in its group and do not end on SIGTERM.
    Stopped while its model was still loading (a Ctrl-C during `trtspec deploy` on a loaded
    machine), tritonserver exited and its stub, finding its parent gone ("Non-graceful termination
    detected"), slept on for minutes with the model in memory (a fresh-clone test run, 2026-11-28)."""
    running = is_running(pid)
    if running:
        _signal_group(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            _signal_group(pid, signal.SIGKILL)
            _wait_gone(pid, 10.0)
    _end_stragglers(pid, STRAGGLER_GRACE_S)
    return running


def _end_stragglers(group: int, grace: float) -> None:
    """SIGKILL what is left of process group `group` (its leader gone) after `grace` seconds. A
    group's id is its leader's pid, which no new group can take while a member lives on."""
    if not _wait_group_gone(group, grace):
        _signal_group(group, signal.SIGKILL)
        _wait_group_gone(group, 5.0)


def _wait_group_gone(group: int, timeout: float) -> bool:
    """Poll until process group `group` has no live member (True) or timeout passes (False)."""
    return _wait(lambda: not group_members(group), timeout)


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of process group `group` (from /proc; empty where it is missing)."""
    return [pid for pid, fields in _proc_stats() if int(fields[2]) == group and fields[0] != "Z"]


def kill(pid: int, *, timeout: float = 10.0) -> bool:
    """SIGKILL the process group led by `pid` at once and wait until it is gone. True if it was running."""
    if not is_running(pid):
        _reap(pid)
        _end_stragglers(pid, 0.0)
        return False
    _signal_group(pid, signal.SIGKILL)
    _wait_gone(pid, timeout)
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    """Reap and poll until `pid` is gone (True) or timeout passes (False)."""
    def gone() -> bool:
        _reap(pid)
        return not is_running(pid)
    return _wait(gone, timeout)


def _wait(done, timeout: float) -> bool:
    """Poll `done()` every 50 ms until it is true (True) or timeout passes (False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _proc_stats():
    """(pid, the fields of /proc/<pid>/stat after the command name) of every process; nothing where
    /proc is missing."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        yield int(stat.parent.name), fields


def children(pid: int) -> list[int]:
    """Every descendant of process `pid` (from /proc; empty where /proc is missing)."""
    parents: dict[int, list[int]] = {}
    for child, fields in _proc_stats():
        parents.setdefault(int(fields[1]), []).append(child)
    found, frontier = [], [pid]
    while frontier:
        kids = parents.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def command_line(pid: int) -> list[str]:
    """The argv of process `pid`, or [] when it is gone or unreadable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _reap(pid: int) -> None:
    # Children we started ourselves stay zombies until waited for.
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _merged_env(env: dict[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    return {**os.environ, **env}
