"""The request sinks (trtspec.triton_model.sinks) through `Replies`, the one thing they know of the model.

The engine's real chunk and statistics types go in; what a sink sends, counts and answers comes
out through a Replies whose callables write down each call (no Triton here: the served path is
tests/serve/test_e2e_cpu.py's).
"""

from __future__ import annotations

import numpy as np
import pytest

from trtspec.runtime.loop.request import RequestCancelled, StreamChunk
from trtspec.runtime.loop.stats import GenerationStats
from trtspec.triton_model.request import InvalidRequest, parse_request
from trtspec.triton_model.sinks import Collector, Replies, Responder

FINAL = 1


def recording_replies(log: list, stream_interval: int = 1) -> Replies:
    return Replies(post=lambda sender, response, flags, on_error: log.append(("post", response, flags)),
                   send_now=lambda sender, response, flags, on_error: log.append(("now", response, flags)),
                   final_flag=FINAL,
                   response=lambda text, reason, extra: ("response", text, reason, extra),
                   error=lambda message, code: ("error", message, code),
                   record=lambda stats: log.append(("record", stats.num_drafts)),
                   count_failure=lambda reason: log.append(("failed", reason)),
                   count_cancelled=lambda: log.append(("cancelled",)),
                   stream_interval=stream_interval)


def parsed(**inputs):
    values = {"text_input": np.array([b"hi"], dtype=np.object_), **inputs}
    return parse_request(values, max_seq_len=512)


class Sender:
    def is_cancelled(self) -> bool:
        return False


def chunk(text: str, finish_reason: str | None = None) -> StreamChunk:
    return StreamChunk(token_ids=[1], text=text, finish_reason=finish_reason, stats=GenerationStats(num_drafts=2))


def test_a_stream_sends_its_first_piece_at_once_then_every_interval_and_the_last_with_the_final_flag():
    log: list = []
    responder = Responder(recording_replies(log, stream_interval=2), Sender())
    responder.bind(parsed(streaming=np.array([True]), stream_delta=np.array([True])))
    for piece in ("a", "b", "c"):
        responder(chunk(piece))
    responder(chunk("d", "length"))
    assert log == [("now", ("response", "a", None, None), 0),       # the first at once, from the loop's thread
                   ("post", ("response", "bc", None, None), 0),     # then two steps' pieces
                   ("record", 2),
                   ("post", ("response", "d", "length", None), FINAL)]


def test_an_engine_failure_is_counted_and_ends_the_request_with_an_error():
    log: list = []
    responder = Responder(recording_replies(log), Sender())
    responder.bind(parsed(streaming=np.array([True])))
    responder(RuntimeError("the engine stopped"))
    assert log == [("failed", "internal"), ("post", ("error", "the engine stopped", "INTERNAL"), FINAL)]


def test_a_collector_answers_once_refuses_streaming_and_counts_a_cancelled_request():
    log: list = []
    collector = Collector(recording_replies(log))
    with pytest.raises(InvalidRequest, match="not decoupled"):
        collector.bind(parsed(streaming=np.array([True])))
    collector.bind(parsed())
    collector(chunk("a"))
    collector(chunk("b", "stop"))
    assert collector.wait() == ("response", "ab", "stop", None) and log == [("record", 2)]

    cancelled = Collector(recording_replies(log))
    cancelled.bind(parsed())
    cancelled(RequestCancelled())
    assert cancelled.wait() == ("error", "Request cancelled by client", "CANCELLED") and log[-1] == ("cancelled",)
