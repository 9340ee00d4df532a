"""What runs inside tritonserver: the cpu backend's Triton Python model around the trtspec engine.

The repository the cpu renderer writes (trtspec.repository.cpu) holds a `tensorrt_llm/1/model.py`
that is one import of `model.TritonPythonModel` from here, so this code is versioned, linted and
tested with the rest of trtspec. `model` (Triton's entry points, metrics, responses), `request`
(Triton input arrays -> a checked Request, pure), `sinks` (what the engine loop hands each
request's steps to), `outbox` (the one thread that sends decoupled responses).

Imports run one way: model -> sinks -> request, model -> outbox, and the engine (trtspec.runtime),
trtspec.chat and trtspec.errors. Nothing here renders a repository or starts a server; nothing
outside imports it but the rendered model.py, the repository's I/O check (request.INPUT_NAMES)
and tests.
"""
