"""EAGLE-3 heads other tools made: read any layout, check it against the target, keep one canonical
head, write each consumer's layout.

  conventions.py  which target layers a head reads: "output of layer i" vs "input of layer i"
  layouts.py      the on-disk layouts (EAGLE authors, SpecForge, ModelOpt <= 0.42 and >= 0.43,
                  speculators) read into one Head (tensors under canonical names + settings)
  checks.py       every check against the target before anything is written (one line each)
  canonical.py    the Head written as trtspec's own heads are (ModelOpt >= 0.43 layout) + manifest
  export.py       the canonical head written back in eagle | modelopt | speculators layout
  stage.py        `trtspec convert --mode eagle3 --head SOURCE`: resolve, read, check, write

The cpu engine and the trtllm builder read only the canonical head; nothing here imports them.
"""
