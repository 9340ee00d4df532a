"""The client tests talk to the tiny cpu server the serve tests start (one per module)."""

from tests.serve.conftest import served  # noqa: F401  (a fixture, used by name)
