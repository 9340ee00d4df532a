"""The benchmark harness: every comparison trtspec's figures come from, one command each.

    python -m benchmarks --help                 # the comparisons, grouped
    python -m benchmarks servers --help         # one comparison's options

`trtspec bench` measures one deployment for a user; this harness is what the project measures
itself with: the cpu engine against its peers (HF transformers), two servers A/B, the OpenAI
endpoint's overhead, draft shapes, threads, and where a step's time goes. Run it from the repository
root (it is not part of the installed package). Every module is one comparison with a `main()`
reading its own argparse options; what they share (prompts, the model, chat-templated ids, medians,
percentiles, ratios) is benchmarks/common.py. Nothing reads a file outside the repository: the
prompts are the packaged ones (trtspec/data/).
"""
