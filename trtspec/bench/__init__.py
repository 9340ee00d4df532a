"""trtspec bench and tune: measure what users feel, choose the draft length from data.

prompts.py loads prompt sets; load.py drives concurrent streaming requests (variants such as
speculative and baseline interleaved) against targets; targets.py adapts the cpu engine
(in-process) and a Triton server (trtspec.client.triton) to them; metrics.py aggregates timings with
pure functions; report.py writes the table, bench.json, CSV; plots.py draws PNGs; runner.py
glues them for the CLI; tune.py picks the draft shape by tokens/s.
"""
