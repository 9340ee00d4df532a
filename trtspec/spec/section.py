"""The base of every spec section: unknown keys are errors, assignments are validated, and each
field's docstring is its description (what `trtspec spec` and the template print)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)
