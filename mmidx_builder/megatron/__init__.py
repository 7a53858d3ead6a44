"""Megatron's data arguments: blends, split strings, per-split data and sizes (blend.py), the
blending indices (blending.py), the splits built over opened files (splits.py) and
:func:`resolve`, which reads a Megatron command line and keywords as the settings, per-split
plans and collator flags they imply (args.py). Pure numpy; no ``datasets``."""

from .args import Resolution, resolve

__all__ = ["Resolution", "resolve"]
