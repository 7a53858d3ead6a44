"""Megatron's data arguments: blends, split strings, per-split data and sizes (blend.py), the
blending indices (blending.py), the splits built over opened files (splits.py) and a
Megatron command line read as these arguments (args.py). Pure numpy; no ``datasets``."""
