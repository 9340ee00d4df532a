"""The backend table (trtspec.backends): every name the spec takes has a row, and every row's
steps and renderer resolve to what `build` and `deploy` call."""

from __future__ import annotations

import inspect
import typing

from trtspec import backends, modes
from trtspec.builders.steps import Steps
from trtspec.spec import schema


def test_the_spec_takes_exactly_the_table_s_backends_in_its_order():
    assert typing.get_args(schema.Backend) == backends.NAMES
    assert modes.BACKENDS == backends.NAMES
    assert backends.GPU == ("trtllm", "trtllm-engine")


def test_every_row_names_steps_and_a_renderer_that_exist():
    for name, row in backends.BACKENDS.items():
        steps = backends.resolve(row.steps)
        assert issubclass(steps, Steps) and steps is not Steps, name
        assert steps.render is not Steps.render, f"{name}: its steps must render an engine"
        render = backends.resolve(row.renderer)
        assert list(inspect.signature(render).parameters)[:5] == ["engine", "spec", "engine_path", "dest",
                                                                   "engine_dir"], name
