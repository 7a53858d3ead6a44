"""``preprocess_data.py --partitions K``: the input lines dealt into K partition files, each
converted, the pairs joined in partition order, which is what Megatron-LM's tool writes.

Its order is not the input's: without ``--keep-sequential-samples`` it deals the lines of the
files matched by ``--input`` (a glob, in ``glob.glob``'s order) to the partitions in turn (line
0 to partition 0, line 1 to partition 1, ...), so the output holds lines 0, K, 2K, ... first;
with it, the partitions are consecutive runs of ``ceil(lines / K)`` lines (the input order).
Megatron-LM writes the partition files beside the input (``X_0.jsonl``) and the partitions'
pairs beside the output; here they go to a temporary folder that is removed afterwards.
"""

from __future__ import annotations

import glob
import gzip
import math
import os
import shutil
import tempfile

from ..errors import ConvertError
from .merge_pairs import merge
from .outputs import output_prefix_for


def _open_text(path: str):
    # Megatron-LM's reading: gzip in text mode for .gz, UTF-8 text otherwise (universal newlines).
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def _line_count(path: str) -> int:
    with _open_text(path) as f:
        return sum(1 for _ in f)


def deal_lines(files: list[str], partitions: int, sequential: bool, folder: str) -> list[str]:
    """The partition files preprocess_data.py writes from ``files``, written in ``folder``."""
    names = [os.path.join(folder, f"partition_{k}.jsonl") for k in range(partitions)]
    size = math.ceil(sum(_line_count(path) for path in files) / partitions) if sequential else None
    outputs = [open(name, "w", encoding="utf-8") for name in names]
    try:
        index = count = 0
        for path in files:
            with _open_text(path) as f:
                for line in f:
                    outputs[index].write(line)
                    if sequential:
                        count += 1
                        if count % size == 0:
                            index += 1
                    else:
                        index = (index + 1) % partitions
    finally:
        for output in outputs:
            output.close()
    return names


def convert_partitions(pattern: str, output_prefix: str, partitions: int, *, keep_sequential_samples: bool = False,
                       overwrite: bool = False, **convert_options) -> dict[str, str]:
    """preprocess_data.py's ``--input pattern --partitions K``: returns the output prefix per
    JSON key. ``convert_options`` are :func:`convert`'s keywords."""
    from .run import convert

    files = glob.glob(pattern)
    if not files:
        raise ConvertError(f"--input {pattern}: matches no file (with --partitions above 1 it is a glob pattern)")
    keys = list(convert_options.get("json_keys", ("text",)))
    level = "sentence" if convert_options.get("split_sentences") else "document"
    outputs = {key: output_prefix_for(output_prefix, key, level) for key in keys}
    work = tempfile.mkdtemp(prefix=".mmidx-partitions-", dir=os.path.dirname(os.path.abspath(output_prefix)))
    try:
        parts = []
        for k, name in enumerate(deal_lines(files, partitions, keep_sequential_samples, work)):
            summary = convert([name], os.path.join(work, f"out_{k}"), **convert_options)
            parts.append(summary.outputs)
        for key, prefix in outputs.items():
            merge([part[key] for part in parts], prefix, overwrite=overwrite)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return outputs


__all__ = ["convert_partitions", "deal_lines"]
