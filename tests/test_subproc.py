"""The subprocess layer: dry-run prints, failures carry stderr, background processes stop."""

from __future__ import annotations

import sys
import time

import pytest

from trtspec import subproc
from trtspec.errors import SubprocessError, ToolMissingError


def test_dry_run_prints_and_runs_nothing(capsys, tmp_path):
    marker = tmp_path / "ran"
    subproc.run(["touch", str(marker)], dry_run=True)
    assert not marker.exists()
    assert capsys.readouterr().out.strip() == f"touch {marker}"


def test_failure_carries_the_stderr_tail():
    with pytest.raises(SubprocessError, match="exit code 3:\nboom"):
        subproc.run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])


def test_missing_tool_is_a_one_line_error():
    with pytest.raises(ToolMissingError, match="no-such-tool-xyz: not found"):
        subproc.run(["no-such-tool-xyz"])


def test_timeout_is_reported():
    with pytest.raises(SubprocessError, match="did not finish"):
        subproc.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)


def test_background_process_starts_logs_and_stops(tmp_path):
    log = tmp_path / "log.txt"
    pid = subproc.start([sys.executable, "-u", "-c", "print('hello', flush=True); import time; time.sleep(60)"],
                        log_path=log)
    deadline = time.monotonic() + 10
    while "hello" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert subproc.is_running(pid)
    assert subproc.stop(pid, timeout=5)
    assert not subproc.is_running(pid)
    assert not subproc.stop(pid)


@pytest.mark.parametrize("leader_dead", [False, True], ids=["leader-running", "leader-already-dead"])
def test_stop_ends_the_group_members_its_leader_left_behind(tmp_path, leader_dead):
    """A child that ignores SIGTERM (as tritonserver's Python stub does) outlives its group's leader;
    stop() must not return with it still running, whether the leader was still running or not."""
    import os
    import signal

    ignoring = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"
    log = tmp_path / "log.txt"
    leader = subproc.start(["sh", "-c", f'"{sys.executable}" -u -c "{ignoring}" & exec sleep 120'], log_path=log)
    deadline = time.monotonic() + 10
    while "up" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = [pid for pid in subproc.group_members(leader) if pid != leader]
    if leader_dead:
        os.kill(leader, signal.SIGKILL)
        os.waitpid(leader, 0)
    started = time.monotonic()
    assert subproc.stop(leader, timeout=5) is not leader_dead
    assert not subproc.is_running(leader)
    assert subproc.group_members(leader) == [] and not subproc.is_running(child)
    assert time.monotonic() - started < subproc.STRAGGLER_GRACE_S + 5
