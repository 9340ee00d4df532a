"""The repository tests render the tiny cpu engine the serve tests build (one per session)."""

from tests.serve.conftest import spec_factory, tiny_cpu_engine  # noqa: F401  (fixtures, used by name)
