"""`serve.dynamo`: NVIDIA Dynamo in front of several trtspec engines (`deploy --target dynamo`, here)
or a DynamoGraphDeployment (`deploy --target dynamo-k8s`, on a cluster). Reference
dynamo-vllm-and-1.3.md: the frontend's router modes, migration, the pinned release."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trtspec.spec.section import Section

# The Dynamo release trtspec installs here (Makefile `dynamo`) and names in DGD images
# (nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:<release>); it pins TensorRT-LLM 1.3.0rc29.
DYNAMO_RELEASE = "1.6.1"
ROUTERS = ("kv", "round-robin", "random")


class DynamoSpec(Section):
    workers: int = Field(2, ge=1, le=64)
    """Engine workers behind the one frontend: local processes for --target dynamo, the worker
    component's replicas in a DynamoGraphDeployment for --target dynamo-k8s."""
    router: Literal[ROUTERS] = "kv"  # type: ignore[valid-type]
    """How the frontend picks a worker: kv sends a request to the worker holding most of its prompt's
    KV blocks (learned from the workers' stored/removed block events) weighed against load;
    round-robin and random ignore caches (Dynamo's --router-mode)."""
    migration_limit: int = Field(3, ge=0, le=100)
    """Times the frontend moves a request whose worker died mid-answer to another worker (prompt and
    tokens so far replayed; the draft state starts cold). 0: the client gets an error instead."""
    system_port: int = Field(0, ge=0, le=32767)
    """--target dynamo: the first worker's metrics and health port (DYN_SYSTEM_PORT; worker i gets
    system_port + i), on serve.host. 0 picks free ports at start (`deploy status` lists them). At
    most 32767: Dynamo 1.6.1 reads the port as a signed 16-bit number."""
    release: str = DYNAMO_RELEASE
    """Dynamo release: the runtime image tag in a DynamoGraphDeployment (tensorrtllm-runtime:<release>)
    and the TensorRT-LLM release contract it carries. Here the installed ai-dynamo wheel runs."""
