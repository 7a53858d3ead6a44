"""Megatron's data arguments: blends, split strings, per-split data and sizes as a plan
(plan.py), BlendedDataset's blending indices (blending_indices.py), the splits built over
opened files (splits.py) and a Megatron command line read as these arguments (args.py).
Pure numpy; no ``datasets``."""

# resolve (args.py): a Megatron command line and keywords read once, as the samples' settings,
# the per-split plans and MegatronCollator's flags.
from .args import Resolution, resolve

__all__ = ["Resolution", "resolve"]
