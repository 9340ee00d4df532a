"""`python -m trtspec ...` is the `trtspec` command (torchrun starts convert's workers this way)."""

from trtspec.cli import main

if __name__ == "__main__":
    main()
