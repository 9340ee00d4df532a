"""A failure that ends the engine's loop thread outside a step fails every waiting and later request
at once, with that error: in process, in `trtspec build`'s smoke generation and through Triton.

The failure is injected with TRTSPEC_INJECT_LOOP_FAILURE (scheduler._injected_failure: the loop
raises after its Nth step, where a step's own error handling never sees it), as an error in
admission, a drafter session or the gauges would end it. Before, such a loop thread died and
every request waited for it for ever (`trtspec build` of a tiny DeepSeek-V3 still waited after 11
minutes)."""

from __future__ import annotations

import threading
import time

import pytest

from trtspec.runtime.loop.request import EngineFailedError


def test_a_dead_loop_fails_the_running_the_queued_and_every_later_request(tiny_llama, monkeypatch):
    from trtspec.runtime import Engine

    with Engine.from_checkpoints(tiny_llama, mode="ngram", max_draft_len=3, max_batch_size=2) as engine:
        assert len(engine.generate([5, 6, 7], max_new_tokens=4).token_ids) == 4  # alive before
        monkeypatch.setenv("TRTSPEC_INJECT_LOOP_FAILURE", "3")
        errors: list[BaseException] = []

        def one():
            try:
                engine.generate(list(range(10, 20)), max_new_tokens=200)
            except BaseException as error:  # noqa: BLE001 - collected for the assertions
                errors.append(error)

        callers = [threading.Thread(target=one) for _ in range(4)]  # 2 running, 2 queued
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(timeout=60)
        assert not any(caller.is_alive() for caller in callers), "a request still waits on the dead loop"
        assert len(errors) == 4 and all(isinstance(error, EngineFailedError) for error in errors), errors
        assert all("injected failure" in str(error) for error in errors)
        monkeypatch.delenv("TRTSPEC_INJECT_LOOP_FAILURE")
        start = time.monotonic()
        with pytest.raises(EngineFailedError, match="the engine stopped: RuntimeError: injected failure"):
            engine.generate([5, 6, 7], max_new_tokens=4)
        assert time.monotonic() - start < 5
        assert engine.scheduler.snapshot().running == 0 and engine.scheduler.snapshot().waiting == 0


def test_the_build_s_smoke_generation_fails_in_one_line_instead_of_hanging(tmp_path, tiny_llama, monkeypatch):
    from click.testing import CliRunner

    from trtspec.cli import main

    (tmp_path / "trtspec.yaml").write_text(
        f"model:\n  source: {tiny_llama}\n  name: tiny\nspeculative:\n  mode: none\n"
        f"build:\n  backend: cpu\n  output_dir: {tmp_path / 'engines'}\nworkdir: {tmp_path / 'work'}\n")
    monkeypatch.setenv("TRTSPEC_INJECT_LOOP_FAILURE", "1")
    result = CliRunner().invoke(main, ["build", "-c", str(tmp_path / "trtspec.yaml")])
    assert result.exit_code != 0
    line = result.output.strip().splitlines()[-1]
    assert "the engine stopped: RuntimeError: injected failure" in line and "Traceback" not in result.output
    assert not list((tmp_path / "engines").glob("*/engine.json")), "a bundle that cannot generate landed"


@pytest.mark.slow
@pytest.mark.e2e
def test_through_triton_every_request_gets_the_error_and_the_server_keeps_answering(tmp_path, tiny_llama):
    from tests.serve.conftest import serving_tiny
    from trtspec.errors import ServerError

    with serving_tiny(tmp_path, tiny_llama, env={"TRTSPEC_INJECT_LOOP_FAILURE": "2"}) as (_, client, _engine):
        for _ in range(2):  # the one that ends the loop, then one sent to the dead engine
            start = time.monotonic()
            with pytest.raises(ServerError, match="the engine stopped: RuntimeError: injected failure"):
                client.generate("Hello there", max_tokens=32)
            assert time.monotonic() - start < 30
        assert client.server_metrics() is not None  # Triton itself still answers
