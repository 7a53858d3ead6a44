"""MegatronCollator against megatron-core 0.19's GPTDataset itself, every flag combination.

Each case builds a real GPTDataset (megatron-core's IndexedDataset, indices and
``__getitem__`` with ``_get_ltor_masks_and_position_ids``) over a corpus we write, stacks
its items with torch's ``default_collate`` as Megatron's loader does, and compares keys,
dtypes, shapes and values with our collator over the rows our builder gives for the same
training positions. Corpora: EOD tokens only at document ends, EOD tokens inside documents
too, no EOD at all.
"""

import itertools
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from mmidx_builder import MMIdx
from mmidx_builder.sources import provenance
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import IndexedFileWriter

from megatron_lm_archive import megatron_lm_reading

EOD = 0
SEQ_LENGTH = 16
MICRO_BATCH = 4
FLAGS = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss", "create_attention_mask",
         "inter_document_masking")


class TinyTokenizer:
    """What GPTDataset asks of a tokenizer."""

    eod = EOD
    vocab_size = None

    def __init__(self, pad=-1):
        self.pad = pad
        self.unique_identifiers = {"class": "TinyTokenizer", "pad": pad}


def write_corpus(prefix, kind, rng, zero_length=False, eod=EOD):
    with IndexedFileWriter(prefix, dtype=np.uint16) as writer:
        for i in range(36):
            n = int(rng.randint(1, 30))
            document = rng.randint(1, 60, n)
            if kind == "eod_inside":
                document[rng.rand(n) < 0.15] = eod
                if rng.rand() < 0.5:
                    document[-1] = eod
            elif kind == "eod_at_ends":
                document[-1] = eod
            if zero_length and i % 5 == 2:
                document = document[:0]
            writer.add_document(document)


def megatron_items(megatron, prefix, cache, flags, add_extra_token, num_samples, pad=-1):
    """megatron-core's GPTDataset over ``prefix``. Its index cache is keyed without
    add_extra_token_to_sequence (a shared cache folder served E=1 indices to an E=0 dataset),
    so each setting gets a folder of its own."""
    from megatron.core.datasets.utils import Split

    cache = f"{cache}-extra{int(add_extra_token)}"
    config = megatron.gpt_dataset.GPTDatasetConfig(
        random_seed=5, sequence_length=SEQ_LENGTH, blend=([prefix], None), split="1,0,0",
        tokenizer=TinyTokenizer(pad), path_to_cache=str(cache), add_extra_token_to_sequence=add_extra_token,
        **dict(zip(FLAGS, flags)))
    low_level = megatron.indexed_dataset.IndexedDataset(prefix)
    documents = np.arange(len(low_level.sequence_lengths), dtype=np.int32)
    return megatron.gpt_dataset.GPTDataset(low_level, prefix, documents, num_samples, Split.train, config)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """Per corpus kind and add_extra_token: (prefix, prepared rows, streamed rows)."""
    root = tmp_path_factory.mktemp("corpora")
    out = {}
    for k, kind in enumerate(("eod_at_ends", "eod_inside", "no_eod")):
        prefix = str(root / f"{kind}_text_document")
        write_corpus(prefix, kind, np.random.RandomState(k))
        for extra in (True, False):
            builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=SEQ_LENGTH, seed=5,
                            add_extra_token=extra, document_structure=True, cache_dir=str(root / "hf"))
            builder.download_and_prepare()
            out[kind, extra] = (prefix, builder.as_dataset("train"), builder.as_streaming_dataset("train"))
    return out


def row_sources(dataset, stream):
    """The same rows in every form the collator accepts."""
    stream_rows, stream_numpy_rows = list(stream), list(stream.with_format("numpy"))
    formatted = {name: dataset.with_format(name) for name in ("numpy", "torch", "arrow")}
    return {
        "python": lambda ids: [dataset[i] for i in ids],
        "numpy": lambda ids: [formatted["numpy"][i] for i in ids],
        "torch": lambda ids: [formatted["torch"][i] for i in ids],
        "arrow rows": lambda ids: [formatted["arrow"][i] for i in ids],
        "arrow table": lambda ids: formatted["arrow"][ids[0]:ids[-1] + 1],
        "stream": lambda ids: [stream_rows[i] for i in ids],
        "stream numpy": lambda ids: [stream_numpy_rows[i] for i in ids],
    }


def assert_same_batch(ours, theirs, torch, label):
    assert list(ours) == list(theirs), f"keys differ, {label}"
    for key in theirs:
        a, b = ours[key], theirs[key]
        assert a.dtype == b.dtype and a.shape == b.shape, f"{key}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}, {label}"
        assert torch.equal(a, b), f"{key} values differ, {label}"


def test_every_flag_combination_equals_gptdataset(megatron, torch, corpora, tmp_path):
    from torch.utils.data import default_collate

    from mmidx_builder import MegatronCollator

    compared = 0
    forms = itertools.cycle(["python", "numpy", "torch", "arrow rows", "arrow table", "stream", "stream numpy"])
    for (kind, extra), (prefix, dataset, stream) in corpora.items():
        sources = row_sources(dataset, stream)
        for case, flags in enumerate(itertools.product((False, True), repeat=len(FLAGS))):
            theirs_dataset = megatron_items(megatron, prefix, tmp_path / "megatron", flags, extra, len(dataset))
            assert len(theirs_dataset) == len(dataset)
            collate = MegatronCollator(EOD, *flags, add_extra_token=extra)
            form = next(forms)
            # megatron-core's items cost ~5 ms each: two micro-batches per combination, at
            # positions moving along the dataset so that every sample is compared many times.
            last = len(dataset) - MICRO_BATCH
            for start in ((case * 2 * MICRO_BATCH) % last, (case * 2 * MICRO_BATCH + MICRO_BATCH) % last):
                ids = list(range(start, start + MICRO_BATCH))
                label = f"{kind} add_extra_token={extra} {dict(zip(FLAGS, flags))} rows {ids} as {form}"
                theirs = default_collate([theirs_dataset[i] for i in ids])
                assert_same_batch(collate(sources[form](ids)), theirs, torch, label)
                compared += 1
    assert compared == 2 * 32 * len(corpora)


def test_pad_id_that_is_a_real_token(megatron, torch, corpora, tmp_path):
    """A tokenizer pad id distinct from EOD: GPTDataset masks such labels and zeroes the ids."""
    from torch.utils.data import default_collate

    from mmidx_builder import MegatronCollator

    prefix, dataset, _ = corpora["eod_inside", True]
    pad = 7
    assert any(pad in row["input_ids"] for row in dataset)
    for flags in [(True, True, True, True, False), (False, False, False, False, True)]:
        theirs_dataset = megatron_items(megatron, prefix, tmp_path / "megatron", flags, True, len(dataset), pad=pad)
        collate = MegatronCollator(EOD, *flags, pad_id=pad)
        for start in range(0, len(dataset) - MICRO_BATCH + 1, MICRO_BATCH):
            ids = range(start, start + MICRO_BATCH)
            assert_same_batch(collate([dataset[i] for i in ids]), default_collate([theirs_dataset[i] for i in ids]),
                              torch, f"pad={pad} {flags}")


def test_zero_length_pieces_give_megatrons_cu_seqlens(megatron, torch, tmp_path):
    """megatron-core keeps zero-length document pieces (an empty sequence inside a sample; with
    add_extra_token=False a sample starting exactly at a sequence's end) as repeated cu_seqlens
    entries; so do our rows' piece_lengths, and the collated batches are equal."""
    from torch.utils.data import default_collate

    from mmidx_builder import MegatronCollator

    prefix = str(tmp_path / "pieces_text_document")
    with IndexedFileWriter(prefix, dtype=np.uint16) as writer:
        for i in range(24):  # sequences of exactly SEQ_LENGTH tokens, and empty ones
            writer.add_document(np.full(0 if i % 4 == 1 else SEQ_LENGTH, i + 1))
    repeated = 0
    for extra in (True, False):
        builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=SEQ_LENGTH, seed=5, add_extra_token=extra,
                        document_structure=True, cache_dir=str(tmp_path / "hf"))
        builder.download_and_prepare()
        dataset = builder.as_dataset("train")
        flags = (False, False, False, False, True)
        theirs_dataset = megatron_items(megatron, prefix, tmp_path / "megatron", flags, extra, len(dataset))
        collate = MegatronCollator(EOD, *flags, add_extra_token=extra)
        whole = collate(dataset.with_format("arrow")[:])  # every row in one batch: rows of 0-length pieces too
        for i in range(len(dataset)):
            ours, theirs = collate([dataset[i]]), default_collate([theirs_dataset[i]])
            for key in ("tokens", "labels", "loss_mask", "position_ids", "max_seqlen", "cu_seqlens"):
                assert torch.equal(ours[key], theirs[key]), (key, i, extra)
                assert torch.equal(whole[key][i], theirs[key][0]), (key, i, extra, "one batch")
            bounds = theirs["cu_seqlens"][0].numpy()
            repeated += int((np.diff(bounds[:np.argmax(bounds)]) == 0).any())
    assert repeated > 0  # zero-length pieces really occur in these samples


def test_eod_id_defaults_to_the_recorded_one(torch, tmp_path):
    from mmidx_builder import MegatronCollator

    prefix = str(tmp_path / "rec_text_document")
    write_corpus(prefix, "eod_inside", np.random.RandomState(3))
    provenance.write_sidecar(prefix, tokenizer="tiny", vocab_size=60, eod_id=EOD, append_eod=True)
    builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=SEQ_LENGTH, cache_dir=str(tmp_path / "hf"))
    builder.download_and_prepare()
    for dataset in (builder.as_dataset("train"), builder.as_streaming_dataset("train")):
        collate = MegatronCollator(dataset=dataset, eod_mask_loss=True)
        assert collate.eod_id == EOD
        with pytest.raises(ParameterError, match="add_extra_token=True"):
            MegatronCollator(dataset=dataset, add_extra_token=False)
    assert MegatronCollator(5, dataset=dataset).eod_id == 5  # an explicit id wins
    write_corpus(str(tmp_path / "bare"), "no_eod", np.random.RandomState(4))
    bare = MMIdx(data_files={"train": [str(tmp_path / "bare.bin")]}, seq_length=SEQ_LENGTH)
    with pytest.raises(ParameterError, match="records no EOD id"):
        MegatronCollator(dataset=bare.as_streaming_dataset("train"))


def test_bad_input_is_refused_clearly(torch, corpora):
    from mmidx_builder import MegatronCollator

    _, dataset, _ = corpora["eod_inside", True]
    with pytest.raises(ParameterError, match="needs eod_id"):
        MegatronCollator()
    with pytest.raises(ParameterError, match="pad_id 0 equals eod_id"):
        MegatronCollator(0, pad_id=0)
    with pytest.raises(ParameterError, match="must be True or False"):
        MegatronCollator(0, reset_position_ids="yes")
    plain = [{"input_ids": row["input_ids"]} for row in dataset.select(range(2))]
    with pytest.raises(ParameterError, match="document_structure=True"):
        MegatronCollator(0, inter_document_masking=True)(plain)
    with pytest.raises(ParameterError, match="no input_ids"):
        MegatronCollator(0)([{"text": "a"}])
    with pytest.raises(ParameterError, match="different lengths"):
        MegatronCollator(0)([{"input_ids": [1, 2, 3]}, {"input_ids": [1, 2]}])
    rows = [dataset[0]]
    with pytest.raises(ParameterError, match="do not sum"):  # rows made with the extra token, read without
        MegatronCollator(0, inter_document_masking=True, add_extra_token=False)(
            [{**rows[0], "piece_lengths": rows[0]["piece_lengths"][:-1]}])


def test_package_imports_without_torch_and_names_the_extra():
    code = textwrap.dedent("""
        import sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        import mmidx_builder
        from mmidx_builder import *  # noqa: F403
        for make in (lambda: mmidx_builder.MegatronCollator(0),
                     lambda: mmidx_builder.megatron_rank_stream(None, 0, 1, 1)):
            try:
                make()
            except ImportError as error:
                assert "pip install 'mmidx-builder[torch]'" in str(error), error
            else:
                raise SystemExit("no ImportError")
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_over_arrow_rows_gives_gptdatasets_batches(megatron, torch, corpora, tmp_path, workers):
    """DataLoader over Dataset.with_format("arrow") fails in datasets 5.2 (its __getitems__
    indexes the batch table like a dict); arrow_rows hands the collator one table per batch."""
    from torch.utils.data import DataLoader, default_collate

    from mmidx_builder import MegatronCollator, arrow_rows

    prefix, dataset, _ = corpora["eod_inside", True]
    for flags in ((True, True, True, True, False), (True, False, True, False, True)):
        theirs_dataset = megatron_items(megatron, prefix, tmp_path / "megatron", flags, True, len(dataset))
        order = np.random.RandomState(1).permutation(len(dataset))[:3 * MICRO_BATCH].tolist()
        loader = DataLoader(arrow_rows(dataset), batch_size=MICRO_BATCH, sampler=order, num_workers=workers,
                            collate_fn=MegatronCollator(EOD, *flags))
        batches = list(loader)
        assert len(batches) == 3
        for b, ours in enumerate(batches):
            ids = order[b * MICRO_BATCH:(b + 1) * MICRO_BATCH]
            assert_same_batch(ours, default_collate([theirs_dataset[i] for i in ids]), torch, f"{flags} batch {b}")


# Megatron-LM command lines whose collator flags (and NullTokenizer pad) differ; one prefix, all
# of it the train split (--split 1,0,0), 2 steps of 8 samples.
COMMAND = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 64 "
           "--micro-batch-size 4 --global-batch-size 8 --train-iters 2 --eval-interval 2 --eval-iters 1 "
           "--tokenizer-type NullTokenizer --vocab-size 64 --data-path {prefix} --split 1,0,0 "
           f"--seq-length {SEQ_LENGTH} --seed 11 ")
COMMAND_FLAGS = ["", "--reset-position-ids --reset-attention-mask", "--eod-mask-loss --no-create-attention-mask-in-dataloader",
                 "--dataloader-inter-document-masking --reset-position-ids --eod-mask-loss",
                 "--reset-position-ids --reset-attention-mask --eod-mask-loss --null-tokenizer-pad-id 7"]


def test_from_megatron_args_gives_the_batches_of_megatron_lms_config(megatron, torch, tmp_path):
    """One command line, read twice. Megatron-LM core_v0.19.0 makes its GPTDatasetConfig of it
    (its parse_args, validate_args and pretrain_gpt's core_gpt_dataset_config_from_args), and
    megatron-core's GPTDataset with that config gives the batches. Ours: the same command line
    to load_dataset and to MegatronCollator.from_megatron_args, nothing else."""
    from datasets import load_dataset
    from megatron.core.datasets.utils import Split
    from torch.utils.data import default_collate

    from mmidx_builder import MegatronCollator

    prefix = str(tmp_path / "eod63_text_document")
    write_corpus(prefix, "eod_inside", np.random.RandomState(8), eod=63)  # NullTokenizer's EOD: --vocab-size - 1
    argvs = [shlex.split(COMMAND.format(prefix=prefix) + flags) for flags in COMMAND_FLAGS]
    configs = megatron_lm_reading("core_v0.19", argvs, tmp_path)["configs"]
    for case, (argv, config) in enumerate(zip(argvs, configs)):
        tokenizer = TinyTokenizer(config.pop("pad"))
        tokenizer.eod = config.pop("eod")
        theirs = megatron.gpt_dataset.GPTDataset(
            megatron.indexed_dataset.IndexedDataset(prefix), prefix, np.arange(36, dtype=np.int32), 16, Split.train,
            megatron.gpt_dataset.GPTDatasetConfig(blend=([prefix], None), split="1,0,0", tokenizer=tokenizer,
                                                  path_to_cache=str(tmp_path / f"megatron{case}"), **config))
        collate = MegatronCollator.from_megatron_args(argv)
        rows = list(load_dataset("mmidx", megatron_args=argv, streaming=True, cache_dir=str(tmp_path / "hf"),
                                 document_structure=collate.inter_document_masking)["train"])
        assert len(rows) == 16 <= len(theirs)  # GPTDataset holds every sample of its epochs
        for start in range(0, 16, MICRO_BATCH):
            ids = range(start, start + MICRO_BATCH)
            assert_same_batch(collate([rows[i] for i in ids]), default_collate([theirs[i] for i in ids]), torch,
                              f"{shlex.join(argv[-12:])} rows {list(ids)}")


def test_from_megatron_args_takes_overrides_and_refuses_other_keywords(torch):
    command = "--data-path A --seq-length 8 --reset-position-ids --tokenizer-type NullTokenizer --vocab-size 64"
    collate = collator_from(command, reset_position_ids=False, eod_mask_loss=True, pad_id=5)
    assert (collate.reset_position_ids, collate.eod_mask_loss, collate.create_attention_mask) == (False, True, True)
    assert (collate.eod_id, collate.pad_id) == (63, 5)
    assert collator_from(command, eod_id=9).eod_id == 9
    with pytest.raises(ParameterError, match=r"seq_length= is not one of MegatronCollator's keywords"):
        collator_from(command, seq_length=16)
    with pytest.raises(ParameterError, match=r"--fim-data is not supported"):
        collator_from(f"{command} --fim-data")
    with pytest.raises(ParameterError, match=r"needs eod_id"):  # not a NullTokenizer: the EOD is not in the line
        collator_from("--data-path A --seq-length 8")


def collator_from(command, **explicit):
    from mmidx_builder import MegatronCollator

    return MegatronCollator.from_megatron_args(command, **explicit)
