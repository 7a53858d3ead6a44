"""Training-side helpers: Megatron's batches and Megatron's per-rank order from our datasets.

    MegatronCollator       rows -> the batch megatron-core's GPTDataset items collate to
                           (collator.py; numpy inside, torch tensors out)
    FairseqCollater        sentence pairs -> fairseq's LanguagePairDataset.collater batch
                           (fairseq_collater.py)
    megatron_rank_stream   a dataset -> one data-parallel rank's rows in the order of
                           Megatron-LM's MegatronPretrainingSampler, for any DataLoader
                           num_workers, with elastic state_dict/load_state_dict (rank_stream.py)
    mosaic_rank_stream     MDS folders -> one rank's rows in the order of mosaicml-streaming's
                           StreamingDataset, for any num_workers, resuming from and to its
                           state dict (mosaic_stream.py)
    mosaic_global_stream   every rank's rows in StreamingDataset's order, for accelerate and
                           the HF Trainer (mosaic_global.py)
    megatron_global_stream every rank's rows in Megatron's global order, for accelerate and the
                           HF Trainer, which deal each process its MegatronPretrainingSampler
                           rows (global_stream.py; launchers.py: how accelerate deals)
    arrow_rows             a prepared Dataset whose DataLoader batches are Arrow tables, the
                           collator's cheapest input (prepared.py)
    numpy_batches          any dataset or stream -> batches as numpy in the stored dtype, for a
                           loop of one's own (as_numpy.py; no torch)

torch is imported only when one of these is used (``pip install 'mmidx-builder[torch]'``),
so ``import mmidx_builder`` works without it.
"""

from __future__ import annotations

__all__ = ["ArrowRows", "FairseqCollater", "MegatronCollator", "MegatronGlobalStream", "MegatronRankStream", "MosaicGlobalStream",
           "MosaicRankStream",
           "arrow_rows", "megatron_global_stream", "megatron_rank_stream", "mosaic_global_stream",
           "mosaic_rank_stream", "numpy_batches"]


def __getattr__(name: str):
    if name == "FairseqCollater":
        from ..fairseq.collater import FairseqCollater

        return FairseqCollater
    if name == "MegatronCollator":
        from .collator import MegatronCollator

        return MegatronCollator
    if name in ("MegatronRankStream", "megatron_rank_stream"):
        from . import rank_stream

        return getattr(rank_stream, name)
    if name in ("MosaicRankStream", "mosaic_rank_stream"):
        from . import mosaic_stream

        return getattr(mosaic_stream, name)
    if name in ("MosaicGlobalStream", "mosaic_global_stream"):
        from . import mosaic_global

        return getattr(mosaic_global, name)
    if name in ("MegatronGlobalStream", "megatron_global_stream"):
        from . import global_stream

        return getattr(global_stream, name)
    if name == "numpy_batches":
        from .as_numpy import numpy_batches

        return numpy_batches
    if name in ("ArrowRows", "arrow_rows"):
        from . import prepared

        return getattr(prepared, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
