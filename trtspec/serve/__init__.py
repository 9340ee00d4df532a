"""`trtspec deploy` after the repository is rendered: start, watch, check and stop tritonserver.

`launch` (pure command lines: local, docker), `k8s` (Deployment and Service manifests as data),
`setup` (what a local tritonserver needs: binary, Python backend stub, environment), `ports`
(one server per port set: locks and identity), `server` (start/stop/status of the local server),
`supervisor` (the process that owns the server after `deploy` returns; `python -m
trtspec.serve.supervisor`).

Imports: trtspec.subproc, trtspec.artifacts, trtspec.errors, the spec; the client only to probe a
started server. It reads a rendered model repository and never writes one (trtspec.repository does).
"""
