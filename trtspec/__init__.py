"""trtspec: a Hugging Face LLM to a speculative-decoding service on NVIDIA's stack.

Pipeline: spec -> convert -> build -> repository -> server -> client/bench. Each stage lives in
its own module and never reaches back up the chain. Heavy imports (torch, modelopt,
tensorrt_llm, tritonclient) happen inside the functions that need them.
"""

__version__ = "0.1.0"
