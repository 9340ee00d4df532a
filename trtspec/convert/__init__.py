"""`trtspec convert`: ModelOpt turns the target into the checkpoints every later stage trusts.

One module per job: `target` (resolve and record the target), `fp8` (ModelOpt FP8 PTQ and both
export formats), `draft` (draft-target compatibility checks and pairing), `reports` (FP8 quality,
EAGLE-3 acceptance), `pipeline` (which stages a spec asks for, skip-on-rerun), `progress` (the
progress callback; cli/ draws), `launch` (the torchrun relaunch and each process's place in it), `first_layers`
(the target's first E layers as a draft: mode layerskip on the GPU backends), and the package `eagle3/` (the EAGLE-3 head's data, training,
data-parallel processes and export).

Contract: every checkpoint is written with `artifacts.atomic_dir` into `Layout.checkpoint(kind)`
and carries manifest.json with `kind`, `weights_sha256`, `source`, `inputs` and (for eagle3 and
draft) `target_sha256`. Nothing here builds engines or starts servers.
"""
