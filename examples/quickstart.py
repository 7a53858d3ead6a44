"""The main job on a small corpus this script makes itself.

Writes a few documents as UTF-8 byte tokens (ids 0-255, end-of-document 256) into a
Megatron-flavour .bin/.idx pair, then inspects it with the `mmidx` command.
"""

import subprocess
import sys
from pathlib import Path

from mmidx_builder import IndexedFileWriter

EOD = 256
DOCUMENTS = [
    "Indexed token files keep a corpus as one flat array of token ids.",
    "The .idx file says where each sequence starts and how long it is.",
    "",  # a document that tokenized to nothing: the format allows it
    "Megatron packs documents into samples of seq_length + 1 tokens, shuffled with a seed.",
    "fairseq writes the same bytes without a document index.",
] * 8


def main(out_dir: str) -> None:
    prefix = Path(out_dir) / "data" / "tiny_text_document"
    with IndexedFileWriter(prefix, vocab_size=EOD + 1) as writer:
        for text in DOCUMENTS:
            writer.add_document(list(text.encode("utf-8")) + [EOD])
    print(f"wrote {prefix}.bin and {prefix}.idx\n")
    # The console script installed next to this interpreter, whether or not the venv is active.
    mmidx = Path(sys.executable).with_name("mmidx")
    subprocess.run([str(mmidx), "inspect", str(prefix)], check=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "example")
