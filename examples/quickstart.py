"""The main job on a small corpus this script makes itself.

Writes a few documents as UTF-8 byte tokens (ids 0-255, end-of-document 256) into a
Megatron-flavour .bin/.idx pair, inspects it with the `mmidx` command, then loads it with
`datasets.load_dataset` (prepared and streaming) and prints packed samples, decoded.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
from datasets import load_dataset

import mmidx_builder  # registers the "mmidx" builder with datasets
from mmidx_builder import IndexedFileWriter

EOD = 256
SEQ_LENGTH = 64
DOCUMENTS = [
    "Indexed token files keep a corpus as one flat array of token ids.",
    "The .idx file says where each sequence starts and how long it is.",
    "",  # a document that tokenized to nothing: the format allows it
    "Megatron packs documents into samples of seq_length + 1 tokens, shuffled with a seed.",
    "fairseq writes the same bytes without a document index.",
] * 8


def decode(tokens) -> str:
    """Bytes back to text; the end-of-document token shows as a bar."""
    tokens = np.asarray(tokens)
    parts = np.split(tokens, np.flatnonzero(tokens == EOD))  # each part after the first starts with EOD
    return "|".join(bytes(part[part != EOD].astype(np.uint8)).decode("utf-8", "replace") for part in parts)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    prefix = out / "data" / "tiny_text_document"
    with IndexedFileWriter(prefix, vocab_size=EOD + 1) as writer:
        for text in DOCUMENTS:
            writer.add_document(list(text.encode("utf-8")) + [EOD])
    print(f"wrote {prefix}.bin and {prefix}.idx\n")
    # The console script installed next to this interpreter, whether or not the venv is active.
    mmidx = Path(sys.executable).with_name("mmidx")
    subprocess.run([str(mmidx), "inspect", str(prefix)], check=True)

    options = dict(seq_length=SEQ_LENGTH, num_epochs=2, seed=1234, cache_dir=str(out / "hf-cache"))
    ds = load_dataset(str(prefix.parent), split="train", **options)
    print(f"\nload_dataset: {ds.num_rows} samples of {SEQ_LENGTH}+1 tokens, features {ds.features}")
    for row in ds.select(range(3)):
        print("  ", repr(decode(row["input_ids"])))
    stream = load_dataset(str(prefix.parent), split="train", streaming=True, **options)
    first = next(iter(stream))["input_ids"]
    print(f"streaming=True gives the same first sample: {first == ds[0]['input_ids']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "example")
