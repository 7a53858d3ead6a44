"""Regenerates dataset_cards/TEMPLATE.md, MOSAIC_TEMPLATE.md (the body of a MosaicML folder's card)
and dataset_cards/example/ (a card and its histogram).

    .venv/bin/python dataset_cards/make_example.py

The example corpus is made here, deterministically, in a temporary folder: 3 splits of
random token ids (seed 0) with the awkward cases a card must show (empty documents, a
document far longer than seq_length). Only README.md and the PNG are kept, so nothing
binary beyond a 2 KB picture is committed.
"""

import shutil
import tempfile
from pathlib import Path

import numpy as np

from mmidx_builder import write_documents
from mmidx_builder.card import (CARD_TEMPLATE, HISTOGRAM_NAME, MOSAIC_CARD_TEMPLATE, README_NAME, CardSettings,
                                write_card)

HERE = Path(__file__).resolve().parent


def make_corpus(folder: Path) -> None:
    rng = np.random.default_rng(0)
    lengths = {"train": rng.geometric(1 / 300, 997), "validation": rng.geometric(1 / 300, 101)}
    lengths["train"][:7] = 0  # empty documents happen (filtered-out text)
    lengths["train"][7] = 20_000  # one document much longer than a sample
    for split, split_lengths in lengths.items():
        documents = [rng.integers(0, 50_257, n) for n in split_lengths]
        write_documents(folder / f"{split}_text_document", documents, dtype=np.uint16)


def main() -> None:
    (HERE / "TEMPLATE.md").write_text(CARD_TEMPLATE)
    (HERE / "MOSAIC_TEMPLATE.md").write_text(MOSAIC_CARD_TEMPLATE)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "example"
        folder.mkdir()
        make_corpus(folder)
        write_card(folder, CardSettings(
            seq_length=1024, repo_id="USER/mmidx-example", license="cc0-1.0", pretty_name="mmidx example",
            tokenizer="GPT-2 BPE ids (vocabulary 50,257), drawn at random for this example",
            made_with="dataset_cards/make_example.py: random token ids, seed 0"))
        out = HERE / "example"
        out.mkdir(exist_ok=True)
        for name in (README_NAME, HISTOGRAM_NAME):
            shutil.copyfile(folder / name, out / name)
    print(f"wrote {HERE / 'TEMPLATE.md'}, {HERE / 'MOSAIC_TEMPLATE.md'} and {out}/")


if __name__ == "__main__":
    main()
