"""Medusa heads for `trtspec convert --mode medusa`: the layouts users bring (`layouts`), trtspec's
own trainer on the target's last hidden states (`train`), the stage that writes
checkpoints/medusa (`stage`)."""
