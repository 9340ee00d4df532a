"""`trtspec convert`: ModelOpt turns the target into the checkpoints every later stage trusts.

One module per job: `target` (resolve and record the target), `fp8` (ModelOpt FP8 PTQ and both
export formats), `eagle3_data` / `eagle3_train` / `eagle3_export` (self-distilled EAGLE-3 head),
`draft` (draft-target compatibility checks and pairing), `reports` (FP8 quality, EAGLE-3
acceptance), `prompts` (prompt sets) and `pipeline` (which stages a spec asks for, skip-on-rerun).

Contract: every checkpoint is written with `artifacts.atomic_dir` into `Layout.checkpoint(kind)`
and carries manifest.json with `kind`, `weights_sha256`, `source`, `inputs` and (for eagle3 and
draft) `target_sha256`. Nothing here builds engines or starts servers.
"""
