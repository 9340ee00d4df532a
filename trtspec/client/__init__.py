"""tritonclient for the served LLM, adapting to the served model's own input names.

`triton` (TritonLLMClient: connection and gRPC streaming), `requests` (which inputs a request sends,
by the model's config), `events` (what comes back: text chunks, finish reason, speculative statistics).
Used by `trtspec infer`, bench and tune, and by convert's `--generate-url` data step.

Imports: tritonclient (inside functions) and trtspec.errors only; it knows no spec, engine or layout.
"""
