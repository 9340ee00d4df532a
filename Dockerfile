# trtspec images. Neither can be built on the development machines (no Docker engine there);
# keep them consistent with pyproject.toml.
#
#   docker build --target gpu -t trtspec:gpu .    # H100/H200: TensorRT-LLM + Triton
#   docker build --target cpu -t trtspec:cpu .    # anywhere: the embedded cpu backend
#
# GPU: nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3 (the newest trtllm-python-py3 container)
# carries TensorRT-LLM 1.2.1, ModelOpt 0.37.0, transformers 4.57.3, Python 3.12.3 and torch 2.10.0a0
# (the version table, trtspec/builders/contract_data/containers.json, with its sources; a test checks
# this FROM tag is the table's default). trtspec writes its GPU artifacts for that release by default
# (build.trtllm_version: 1.2.1): the LLM API (PyTorch backend) with the Eagle (EAGLE-3), DraftTarget
# and NGram speculative configs served by /app/all_models/llmapi, and the legacy trtllm-build +
# inflight_batcher_llm path. Before the server starts, the container runs trtspec's probe
# (python3 -m trtspec.serve.probe): a release that does not know a key trtspec wrote stops it in one
# line. For TensorRT-LLM 1.1.0 build FROM a 25.12-26.02 tag
#   docker build --target gpu --build-arg TRITON_TRTLLM_IMAGE=nvcr.io/nvidia/tritonserver:25.12-trtllm-python-py3 .
# and set build.trtllm_version: 1.1.0. The container's own torch, TensorRT-LLM, ModelOpt and
# transformers are kept (trtspec is installed without dependencies, plus the few light ones it
# adds): `trtspec convert` runs on the container's ModelOpt 0.37 (tested in a virtualenv with
# ModelOpt 0.37.0 and transformers 4.56.0: tests/builders/test_container_modelopt.py).
ARG TRITON_TRTLLM_IMAGE=nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3

FROM ${TRITON_TRTLLM_IMAGE} AS gpu
WORKDIR /opt/trtspec
COPY pyproject.toml README.md ./
COPY trtspec ./trtspec
RUN python3 -m pip install --no-cache-dir --no-deps . \
 && python3 -m pip install --no-cache-dir "click>=8.1" "pydantic>=2.7,<3" "pyyaml>=6" "rich>=13" \
      "tritonclient[grpc,http]" "gguf>=0.10" "matplotlib>=3.8"
ENV TRTSPEC_CACHE=/cache/trtspec
EXPOSE 8000 8001 8002
ENTRYPOINT ["trtspec"]
CMD ["--help"]

FROM python:3.11-slim AS cpu
WORKDIR /opt/trtspec
COPY pyproject.toml README.md ./
COPY trtspec ./trtspec
# torch pinned first. Pass a CPU-only wheel index with --build-arg PIP_EXTRA_INDEX_URL=... to
# avoid the multi-GB CUDA build.
ARG PIP_EXTRA_INDEX_URL=""
RUN python -m pip install --no-cache-dir torch==2.13.0 \
 && python -m pip install --no-cache-dir .
ENV TRTSPEC_CACHE=/cache/trtspec
EXPOSE 8000 8001 8002
ENTRYPOINT ["trtspec"]
CMD ["--help"]
