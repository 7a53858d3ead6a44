"""Text or token lists -> ``.bin``/``.idx``: Megatron's ``tools/preprocess_data.py``, as a library.

The path of one document, and the module of each step:

    input file ──reader (this process)──> Batch of raw lines / rows, in input order
        ──worker process──> parse, check, tokenizer.encode_batch, + EOD
        ──this process, in submission order──> IndexedFileWriter per JSON key

    inputs.py      the inputs planned (each one's format told from its name by the reader
                   table), sizes laid end to end, this shard's part read in input order
    readers/       one module per input format, chosen by ``readers.READERS`` (format -> reader):
                   json_lines.py, text.py, parquet.py, hf.py; base.py the Batch and line reading
    records.py     what makes a record good (keys, types, max_document_chars)
    encode.py      one batch -> token arrays: what a worker does (sentences.py splits sentences)
    workers.py     the pool: batches encoded in processes, results back in submission order
    outputs.py     Megatron's output names; each result written in order and counted
    summary.py     ConvertSummary, what a run did (and the table the CLI prints)
    progress.py    the progress bar
    run.py         convert(): checks, tokenizer, locked outputs, the loop
    merge_pairs.py merge(): pairs joined in order (Megatron's merge_datasets)
    partitions.py  convert_partitions(): preprocess_data.py's --partitions, lines dealt as it deals them
    to_mds.py      pairs_to_mds(): documents -> MDS token samples (one a document, or LLM
                   Foundry's concatenated samples), shards written by mosaic/writer.py
    from_mds.py    mds_to_pairs(): MosaicML token shards -> a pair (a document a sample, or
                   the ids cut after every EOS)
    tokenize.py    the tokenizer adapters (tokenizer_config.py, autotokenizer.py and
                   megatron_tokenizers.py read what each kind needs)

Outputs are named as preprocess_data names them, ``{prefix}_{key}_document.bin/.idx``, and
hold what it writes: uint16 ids below 65,500 vocabulary entries else int32 (Megatron's
``DType.optimal_dtype``), EOD appended to every non-empty document, and a document that
tokenizes to nothing stored as a document of zero sequences. With ``split_sentences``
(:mod:`.sentences`) every non-empty sentence is one sequence of its document, the EOD
closes the last one, and the names end in ``_sentence``.

Messages name keyword arguments (``workers=``); the ``mmidx`` command reports them as its flags.
"""

from __future__ import annotations

from .from_mds import mds_to_pairs
from .inputs import Input, plan_inputs
from .merge_pairs import merge
from .outputs import output_prefix_for
from .records import MAX_DOCUMENT_CHARS
from .run import convert
from .summary import ConvertSummary, TokensSummary
from .to_mds import pairs_to_mds

__all__ = ["ConvertSummary", "Input", "MAX_DOCUMENT_CHARS", "TokensSummary", "convert", "mds_to_pairs", "merge",
           "output_prefix_for", "pairs_to_mds", "plan_inputs"]
