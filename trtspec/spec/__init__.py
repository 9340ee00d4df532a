"""The spec: one validated description of the whole pipeline, read once at the boundary.

`schema` (the pydantic models, `validate_spec`), `loading` (`load_spec`: the only YAML reader, flag
overrides, paths anchored to the file), `checks` (the one-line `field.path: problem; fix` errors and
the checks that are not plain ranges), `template` (the commented YAML `trtspec init` writes).

Imports: pydantic, PyYAML and trtspec.errors only. Every later stage receives a `Spec` and trusts it;
nothing here reads checkpoints, engines or servers.
"""
