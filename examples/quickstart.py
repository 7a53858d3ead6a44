"""The main job on a small corpus this script makes itself, and the files the README's examples use.

Writes a few documents as UTF-8 byte tokens (ids 0-255, end-of-document 256) into a
Megatron-flavour .bin/.idx pair, inspects it with the `mmidx` command, then loads it with
`datasets.load_dataset` (prepared and streaming) and prints packed samples, decoded.

Then it writes, in the same folder, every file the README's examples name (JSON lines and a
word-level tokenizer.json, pairs made from them by `mmidx convert`, raw files), so that the
examples run as pasted there: `cd example` after `bash scripts/quickstart.sh`.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from datasets import load_dataset

import mmidx_builder  # registers the "mmidx" builder with datasets
from mmidx_builder import IndexedFileWriter
from mmidx_builder.convert import convert

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


WORDS = "the a corpus of token files trains models fast and exactly as megatron does".split()


def tokenizer_json(words) -> dict:
    """A word-level tokenizer in the `tokenizers` library's JSON format (<unk> 0, EOD 1):
    written as the library writes it, without the library."""
    vocab = {"<unk>": 0, "<|endoftext|>": 1, **{w: i + 2 for i, w in enumerate(sorted(set(words)))}}
    eod = {"id": 1, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False,
           "normalized": False, "special": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [eod], "normalizer": None,
            "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}


def write_readme_files(out: Path) -> list[str]:
    """The files the README's examples name, under the names they use; returns them."""
    rng = np.random.default_rng(1234)
    (out / "texts").mkdir(parents=True, exist_ok=True)
    for part in range(2):  # 200 documents of 3-60 words each
        with open(out / "texts" / f"part-{part}.jsonl", "w") as f:
            for n in rng.integers(3, 60, 200).tolist():
                f.write(json.dumps({"text": " ".join(rng.choice(WORDS, n).tolist())}) + "\n")
    (out / "tokenizer.json").write_text(json.dumps(tokenizer_json(WORDS)))
    # Pairs as `mmidx convert --tokenizer bytes --append-eod` writes them (with the .mmidx-info
    # sidecar that records the EOD id): a blend's two prefixes, and a folder of two splits.
    for prefix, part in (("data/a", 0), ("data/b", 1), ("corpus/train", 0), ("corpus/validation", 1)):
        convert([str(out / "texts" / f"part-{part}.jsonl")], str(out / prefix), "bytes", append_eod=True,
                overwrite=True)
    for label, sizes in (("cat", (300, 1200)), ("dog", (500, 70))):  # raw files in class folders
        (out / "raw" / label).mkdir(parents=True, exist_ok=True)
        for i, size in enumerate(sizes):
            (out / "raw" / label / f"{i}.txt").write_text(" ".join(rng.choice(WORDS, size // 6).tolist()))
    return ["texts/part-0.jsonl", "texts/part-1.jsonl", "tokenizer.json", "data/a_text_document",
            "data/b_text_document", "corpus/train_text_document", "corpus/validation_text_document",
            "raw/cat", "raw/dog"]


def main(out_dir: str) -> None:
    out = Path(out_dir)
    prefix = out / "tiny" / "tiny_text_document"
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

    written = write_readme_files(out)
    print(f"\nthe README's examples run in {out} (cd {out}); it holds {', '.join(written)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "example")
