"""`trtspec convert`: ModelOpt turns the target into the checkpoints every later stage trusts.

One module per job: `target` (resolve and record the target), `fp8` (ModelOpt FP8 PTQ and both
export formats), `draft` (draft-target compatibility checks and pairing), `reports` (FP8 quality,
EAGLE-3 acceptance), `pipeline` (which stages a spec asks for, skip-on-rerun), `progress` (the
progress callback; cli/ draws). The EAGLE-3 head: `eagle3` (the stage), `eagle3_sources`
(conversation data), `eagle3_data` (self-distilled rows in process) and `eagle3_remote` (through a
server), `eagle3_store` (rows and features on disk), `eagle3_prepare` (rows, draft vocabulary and
features, shared out over processes), `eagle3_features` (the frozen target's pass),
`eagle3_train` (ModelOpt conversion and the training loop), `eagle3_batches` (global batches and
the loss that keeps them), `eagle3_device` (device and autocast), `distributed` and `torchrun`
(data-parallel processes), `eagle3_export` and `curve` (export, acceptance over snapshots).

Contract: every checkpoint is written with `artifacts.atomic_dir` into `Layout.checkpoint(kind)`
and carries manifest.json with `kind`, `weights_sha256`, `source`, `inputs` and (for eagle3 and
draft) `target_sha256`. Nothing here builds engines or starts servers.
"""
