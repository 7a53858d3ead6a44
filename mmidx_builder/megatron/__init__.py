"""Megatron's data arguments: blends, split strings, per-split data and sizes as a plan
(plan.py), BlendedDataset's blending indices (blending_indices.py), the splits built over
opened files (splits.py) and a Megatron command line read as these arguments (args.py).
Pure numpy; no ``datasets``."""
