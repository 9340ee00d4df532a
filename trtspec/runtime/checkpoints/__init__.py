"""Checkpoints into the engine's parts: which architectures run, float32/bfloat16 and FP8 loading."""
