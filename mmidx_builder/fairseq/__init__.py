"""fairseq's data side: dictionaries and language pairs (pairs.py), the load_langpair_dataset
options that change what a pair holds (items.py), max_tokens batches (batches.py),
fairseq-preprocess of our own (preprocess.py) and LanguagePairDataset.collater's batches
(collater.py, torch imported when used).

May import: the foundation, storage/ and sources/. The datasets builder of language pairs is
hf/mmidx_fairseq.py, one layer up.
"""

from __future__ import annotations

from .batches import batch_by_size, max_tokens_batches, ordered_indices, shard_batches
from .pairs import (OVERWRITE_FLAG, Dictionary, LanguagePairs, PairShard, check_upsample_primary, dictionary_path,
                    find_language_pairs, is_pair_file, pair_schema, pair_tables, post_process)

__all__ = ["OVERWRITE_FLAG", "Dictionary", "LanguagePairs", "PairShard", "batch_by_size", "check_upsample_primary",
           "dictionary_path", "find_language_pairs", "is_pair_file", "max_tokens_batches", "ordered_indices",
           "pair_schema", "pair_tables", "post_process", "shard_batches"]
