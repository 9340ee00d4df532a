"""The EAGLE-3 head: self-distilled data -> ModelOpt convert -> budgeted training -> export.

`stage` (the convert stage end to end), `sources` (the user's conversations or a prompt file),
`data` (rows answered by the target in process) and `remote` (through a running server), `store`
(rows and features on disk), `prepare` (rows, draft vocabulary and features, shared out over
processes), `features` (the frozen target's pass), `train` (ModelOpt conversion and the training
loop), `batches` (global batches and the loss that keeps them), `device` (device and autocast),
`distributed` and `torchrun` (data-parallel processes), `modelopt_compat` (ModelOpt version
differences), `export` and `curve` (export, acceptance over training snapshots).

Imports: torch, transformers, modelopt (inside functions), trtspec.artifacts, chat, prompts, the
client (remote data only) and the cpu engine (acceptance only). It writes checkpoints; it never
builds engines or starts servers.
"""
