"""trtspec bench and tune: measure what users feel, choose the draft length from data.

prompts.py loads prompt sets; load.py drives concurrent streaming requests (speculative and
baseline interleaved) against a target, either a Triton server through trtspec.client or the
cpu engine in-process; metrics.py aggregates timings with pure functions; report.py writes the
table, bench.json, CSV; plots.py draws PNGs; tune.py picks max_draft_len by tokens/s.
"""
