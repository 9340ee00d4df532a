"""`serve`: where and how `trtspec deploy` serves (ports, the supervisor, the APIs opened, Dynamo)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from trtspec.spec.checks import host_problem, is_loopback, problem_line
from trtspec.spec.dynamo import DynamoSpec
from trtspec.spec.section import Section


class ServeSpec(Section):
    host: str = "127.0.0.1"
    """Address the server binds; loopback unless you mean to expose it."""
    http_port: int = Field(8000, ge=1, le=65535)
    """HTTP/REST port (health, metadata)."""
    grpc_port: int = Field(8001, ge=1, le=65535)
    """gRPC port (tritonclient streaming)."""
    metrics_port: int = Field(8002, ge=1, le=65535)
    """Prometheus metrics port."""
    openai_port: int = Field(0, ge=0, le=65535)
    """OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models, /health)
    on serve.host, forwarding to the Triton model over gRPC; 0 turns it off (e.g. 9000 to serve it)."""
    repository: str = "model_repository"
    """Where `deploy` renders the Triton model repository."""
    instance_count: int = Field(1, ge=1, le=64)
    """Model instances (cpu backend: engine copies serving requests in parallel)."""
    max_queue_delay_us: int = Field(0, ge=0)
    """Dynamic batching queue delay in microseconds."""
    max_queue_size: int = Field(64, ge=0)
    """cpu backend: requests that may wait for a batch slot or KV cache blocks; beyond, a new
    request is refused at once with a "server busy" error."""
    streaming: bool = True
    """Serve decoupled (streaming) responses."""
    stream_interval: int = Field(1, ge=1, le=1024)
    """cpu backend: engine steps a streamed request's tokens gather in before a response carries
    them (TensorRT-LLM's LLM API stream_interval); the first tokens and the last go out at once.
    1 sends every step's tokens. Fewer responses leave the cores to the engine: 4 measured 1.04x
    tokens/s at concurrency 1, 1.05x at 8 and 1.08x at 16 through Triton on a 2-core CPU
    (docs/BENCHMARKS-log.md), with the text arriving in larger pieces."""
    startup_timeout_s: float = Field(120.0, gt=0)
    """How long a (re)started server may take to serve: /v2/health/ready, its own id on both
    ports, and a one-token inference."""
    restart: Literal["on-failure", "never"] = "on-failure"
    """What the supervisor does when tritonserver or its Python stub dies: on-failure starts it
    again (up to 5 times in 10 minutes), never records it dead. In-flight requests get an error
    at once either way."""
    open_apis: list[Literal["shared-memory", "model-repository", "logging", "trace"]] = Field(default_factory=list)
    """Triton APIs opened to clients on HTTP and gRPC. Closed by default: system shared memory
    lets any client make the server read /dev/shm regions (or abort it), model-repository loads
    and unloads models, logging and trace change server settings."""
    http_inference: bool = True
    """Serve inference on the HTTP port (generate, generate_stream, infer). false leaves HTTP to
    health, metadata and statistics and gRPC as the only inference path: Triton 2.51 crashes on
    a deeply nested JSON body (docs/DEPLOY.md, Closed by default)."""
    dynamo: DynamoSpec = Field(default_factory=DynamoSpec)
    """deploy --target dynamo | dynamo-k8s: the NVIDIA Dynamo frontend, router and workers
    (docs/DEPLOY.md, More than one server)."""

    @field_validator("host")
    @classmethod
    def _host_is_an_address(cls, host: str) -> str:
        problem = host_problem(host)
        if problem:
            raise ValueError(problem_line("serve.host", problem, got=repr(host),
                                          fix="use 127.0.0.1 (this machine only), 0.0.0.0 (every interface) "
                                              "or a name this machine resolves"))
        return host

    @property
    def exposed(self) -> bool:
        """True when the server would listen beyond loopback (it has no authentication)."""
        return not is_loopback(self.host)

    @model_validator(mode="after")
    def _distinct_ports(self) -> ServeSpec:
        ports = [self.http_port, self.grpc_port, self.metrics_port] + ([self.openai_port] if self.openai_port else [])
        if len(set(ports)) != len(ports):
            raise ValueError(f"serve: http_port, grpc_port, metrics_port and openai_port must differ (got {ports})")
        return self
