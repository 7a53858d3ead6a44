"""End-to-end tests of the datasets builder: every entry point, streaming or not, checked
token for token against the sampling layer (itself checked against megatron-core)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import datasets
from datasets import load_dataset, load_dataset_builder
from datasets.distributed import split_dataset_by_node

import mmidx_builder
from mmidx_builder.megatron import sampling
from mmidx_builder.errors import MissingPartnerError, MMIdxError, ParameterError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter, write_documents
from mmidx_builder.sources.token_source import Concatenated
from mmidx_builder import MMIdx
from mmidx_builder.hf.tables import shard_ranges

from range_server import RangeServer, require_remote_extra

SEQ = 16
SEED = 77


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, random_documents, awkward_lengths, write_corpus):
    """A folder with a train split of two pairs (117 + 60 documents) and a validation pair."""
    root = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(0)
    names = {"train-00000": 117, "train-00001": 60, "validation": 41}
    written = write_corpus(root, {name: random_documents(rng, awkward_lengths(rng, count, SEQ), vocab=3000)
                                  for name, count in names.items()})
    return root, {"train": [written["train-00000"], written["train-00001"]], "validation": [written["validation"]]}


def expected_samples(prefixes, **params):
    source = Concatenated([IndexedFile.open(p) for p in prefixes])
    params = {"seq_length": SEQ, "seed": SEED, **params}
    indices = sampling.build_indices(source.sequence_lengths, **params)
    return sampling.assemble_samples(source, indices, np.arange(indices.num_samples)), source, indices


def column(dataset, name="input_ids") -> np.ndarray:
    return dataset.with_format("numpy")[:][name]


def rows(dataset) -> np.ndarray:
    return np.array([np.asarray(example["input_ids"]) for example in dataset])


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "hf-cache")


def test_folder_splits_from_file_names(corpus, cache):
    root, prefixes = corpus
    ds = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_epochs=2, cache_dir=cache)
    assert set(ds) == {"train", "validation"}
    for split in ("train", "validation"):
        expected, _, _ = expected_samples(prefixes[split], num_epochs=2)
        got = column(ds[split], "input_ids")
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_storage_keeps_the_file_dtype(corpus, cache):
    root, _ = corpus
    ds = load_dataset(str(root), seq_length=SEQ, seed=SEED, cache_dir=cache, split="train")
    feature = ds.features["input_ids"]
    assert feature.length == SEQ + 1 and feature.feature.dtype == "uint16"
    assert str(ds.data.schema.field("input_ids").type) == f"fixed_size_list<item: uint16>[{SEQ + 1}]"


def test_dtype_out(corpus, cache):
    root, prefixes = corpus
    ds = load_dataset(str(root), seq_length=SEQ, seed=SEED, dtype="int32", cache_dir=cache, split="validation")
    assert ds.features["input_ids"].feature.dtype == "int32"
    expected, _, _ = expected_samples(prefixes["validation"])
    np.testing.assert_array_equal(column(ds), expected)


def test_named_builder_with_data_files_glob_matching_both_files(corpus, cache):
    root, prefixes = corpus
    ds = load_dataset("mmidx", data_files={"train": str(root / "train-*.*")}, seq_length=SEQ, seed=SEED,
                      num_samples=50, cache_dir=cache, split="train")
    expected, _, _ = expected_samples(prefixes["train"], num_samples=50)
    assert len(ds) == 50
    np.testing.assert_array_equal(column(ds, "input_ids"), expected)


def test_streaming_equals_prepared(corpus, cache):
    root, prefixes = corpus
    stream = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_samples=300, streaming=True,
                          cache_dir=cache, split="train")
    expected, _, _ = expected_samples(prefixes["train"], num_samples=300)
    np.testing.assert_array_equal(rows(stream), expected)


def test_builder_class_directly_needs_no_registration(corpus, tmp_path):
    """Run where nothing registered the builders: the class itself is the stable route."""
    root, prefixes = corpus
    files = {"train": [p + ".bin" for p in prefixes["train"]]}
    expected, _, _ = expected_samples(prefixes["train"])
    np.save(tmp_path / "expected.npy", expected)
    code = textwrap.dedent(f"""
        import sys, numpy as np
        from mmidx_builder.hf.mmidx_indexed import MMIdxIndexed
        from mmidx_builder.hf import registry
        import datasets.packaged_modules as packaged
        # mmidx_builder's __init__ ran (it registers); undo it to prove the class needs none.
        for name in registry.BUILDER_MODULES:
            packaged._PACKAGED_DATASETS_MODULES.pop(name)
        builder = MMIdxIndexed(data_files={files!r}, seq_length={SEQ}, seed={SEED}, cache_dir={str(tmp_path / "c")!r})
        expected = np.load({str(tmp_path / "expected.npy")!r})
        streamed = np.array([row["input_ids"] for row in builder.as_streaming_dataset(split="train")])
        builder.download_and_prepare()
        prepared = builder.as_dataset(split="train").with_format("numpy")[:]["input_ids"]
        assert "mmidx" not in packaged._PACKAGED_DATASETS_MODULES
        assert np.array_equal(streamed, expected) and np.array_equal(prepared, expected)
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_front_door_returns_the_kinds_builder(corpus, tmp_path):
    root, prefixes = corpus
    builder = MMIdx(data_files={"train": [p + ".bin" for p in prefixes["train"]]}, seq_length=SEQ,
                    cache_dir=str(tmp_path / "c"))
    assert type(builder).__name__ == "MMIdxIndexed" and builder.config.seq_length == SEQ


@pytest.mark.parametrize("option, kind", [
    ({"n_bytes": 1, "style": "diff", "num_epochs": 5}, "mmidx_raw_chunks"),
    ({"n_bytes": 1, "style": "diff", "seed": 3}, "mmidx_raw_chunks"),
    ({"n_bytes": 1, "style": "diff", "document_structure": True}, "mmidx_raw_chunks"),
    ({"source_lang": "de", "target_lang": "en", "dtype": "int64"}, "mmidx_fairseq"),
    ({"upsample_primary": 2, "num_epochs": 5}, "mmidx_fairseq"),
    ({"decode_text": True, "document_structure": True}, "mmidx_fairseq"),
    ({"bpe": "sentencepiece"}, "mmidx_indexed"),  # the settings that pick fairseq are fine...
    ({"seq_length": 8, "style": "concat"}, "mmidx_indexed"),
    ({"seq_length": 8, "upsample_primary": 2, "num_samples": 3}, "mmidx_fairseq"),
])
def test_an_option_that_does_not_apply_raises_naming_the_builder(corpus, tmp_path, option, kind):
    root, prefixes = corpus
    files = {"train": [p + ".bin" for p in prefixes["train"]]}
    if option == {"bpe": "sentencepiece"}:
        # ...a fairseq setting on .bin/.idx pairs goes to the fairseq builder, which finds no pairs.
        with pytest.raises(ParameterError, match="language-pair"):
            load_dataset("mmidx", data_files=files, cache_dir=str(tmp_path / "c"), **option)
        return
    with pytest.raises(ParameterError, match=f"does not apply to .*the {kind} builder.*it is a setting of"):
        load_dataset("mmidx", data_files=files, cache_dir=str(tmp_path / "c"), **option)


def test_a_kind_builder_rejects_foreign_settings_itself(corpus, tmp_path):
    from mmidx_builder.hf.mmidx_fairseq import MMIdxFairseq

    root, prefixes = corpus
    with pytest.raises((ParameterError, TypeError, ValueError), match="num_epochs"):
        MMIdxFairseq(data_files={"train": [prefixes["train"][0] + ".bin"]}, num_epochs=2,
                     cache_dir=str(tmp_path / "c"))


def test_fast_tables_equal_the_reference_generator(corpus):
    _, prefixes = corpus
    expected, source, indices = expected_samples(prefixes["train"], num_epochs=3)
    reference = np.array(list(sampling.iter_reference_samples(source, indices)))
    np.testing.assert_array_equal(reference, expected)


def test_document_structure_columns(corpus, cache):
    root, prefixes = corpus
    ds = load_dataset(str(root), seq_length=SEQ, seed=SEED, document_structure=True, cache_dir=cache,
                      split="validation")
    _, source, indices = expected_samples(prefixes["validation"])
    position_ids, pieces = sampling.document_structure(indices, source.sequence_lengths,
                                                       np.arange(indices.num_samples))
    np.testing.assert_array_equal(column(ds, "position_ids"), position_ids)
    for got, want in zip(ds["piece_lengths"], pieces):
        assert got == list(want) and sum(got) == SEQ + 1


def test_readme_configs_are_honoured_and_call_kwargs_override(tmp_path, corpus, cache):
    root, prefixes = corpus
    folder = tmp_path / "with_card"
    folder.mkdir()
    for p in prefixes["validation"]:
        for ext in (".bin", ".idx"):
            os.link(p + ext, folder / ("heldout" + ext))
    (folder / "README.md").write_text(textwrap.dedent(f"""\
        ---
        configs:
        - config_name: default
          data_files:
          - split: test
            path: heldout.bin
          seq_length: {SEQ}
          seed: {SEED}
        ---
        """))
    ds = load_dataset(str(folder), cache_dir=cache)
    assert list(ds) == ["test"]
    expected, _, _ = expected_samples(prefixes["validation"])
    np.testing.assert_array_equal(column(ds["test"]), expected)
    ds = load_dataset(str(folder), seed=SEED + 1, cache_dir=cache, split="test")
    expected, _, _ = expected_samples(prefixes["validation"], seed=SEED + 1)
    np.testing.assert_array_equal(column(ds, "input_ids"), expected)


def test_shard_ranges_cover_once_and_balance():
    for total in (1, 7, 100, 961):
        for shards in (1, 3, 960):
            ranges = shard_ranges(total, shards)
            assert np.array_equal(np.concatenate([np.arange(a, b) for a, b in ranges]), np.arange(total))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_split_dataset_by_node_covers_every_sample_once(corpus, cache, world_size):
    root, prefixes = corpus
    stream = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_samples=203, num_shards=8, streaming=True,
                          cache_dir=cache, split="train")
    expected, _, _ = expected_samples(prefixes["train"], num_samples=203)
    per_rank = [rows(split_dataset_by_node(stream, rank=r, world_size=world_size)) for r in range(world_size)]
    counts = [len(r) for r in per_rank]
    assert sum(counts) == len(expected) and max(counts) - min(counts) <= 1
    got = np.concatenate(per_rank)
    # Every sample exactly once: compare as sorted multisets of rows.
    np.testing.assert_array_equal(got[np.lexsort(got.T[::-1])], expected[np.lexsort(expected.T[::-1])])


def test_dataloader_with_two_workers_covers_every_sample_once(corpus, cache):
    torch = pytest.importorskip("torch")
    root, prefixes = corpus
    stream = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_shards=6, streaming=True, cache_dir=cache,
                          split="train").with_format("torch")
    loader = torch.utils.data.DataLoader(stream, batch_size=None, num_workers=2)
    got = np.array([example["input_ids"].numpy() for example in loader])
    expected, _, _ = expected_samples(prefixes["train"])
    assert len(got) == len(expected)
    np.testing.assert_array_equal(got[np.lexsort(got.T[::-1])], expected[np.lexsort(expected.T[::-1])])


def test_resume_mid_epoch_yields_exactly_the_rest(corpus, cache):
    root, prefixes = corpus
    stream = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_shards=5, streaming=True, cache_dir=cache,
                          split="train")
    expected, _, _ = expected_samples(prefixes["train"])
    iterator = iter(stream)
    head = [next(iterator)["input_ids"] for _ in range(37)]
    state = stream.state_dict()
    stream.load_state_dict(state)
    rest = rows(stream)
    np.testing.assert_array_equal(np.concatenate([np.array(head), rest]), expected)


@pytest.mark.skipif(not hasattr(datasets.IterableDataset, "reshard"),
                    reason=f"IterableDataset.reshard() came with datasets 4.6 (installed: {datasets.__version__})")
def test_reshard_splits_shards_and_keeps_samples(corpus, cache):
    root, prefixes = corpus
    stream = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_shards=3, streaming=True, cache_dir=cache,
                          split="train")
    more = stream.reshard()
    assert more.num_shards == 6
    expected, _, _ = expected_samples(prefixes["train"])
    np.testing.assert_array_equal(rows(more), expected)


def test_num_proc_preparation(corpus, cache):
    root, prefixes = corpus
    ds = load_dataset(str(root), seq_length=SEQ, seed=SEED, num_epochs=2, num_proc=2, cache_dir=cache,
                      split="train")
    expected, _, _ = expected_samples(prefixes["train"], num_epochs=2)
    np.testing.assert_array_equal(column(ds, "input_ids"), expected)


def test_verification_records_checksums_and_checks_split_sizes(tmp_path, corpus, cache):
    root, prefixes = corpus
    builder = load_dataset_builder(str(root), seq_length=SEQ, seed=SEED, cache_dir=cache)
    builder.download_and_prepare(verification_mode="all_checks")
    checksums = builder.info.download_checksums
    bins = [k for k in checksums if k.endswith(".bin")]
    assert len(bins) == 3 and all(len(checksums[k]["checksum"]) == 64 for k in bins)

    folder = tmp_path / "wrong_sizes"
    folder.mkdir()
    for ext in (".bin", ".idx"):
        os.link(prefixes["validation"][0] + ext, folder / ("train" + ext))
    (folder / "README.md").write_text(textwrap.dedent(f"""\
        ---
        dataset_info:
          features:
          - name: input_ids
            list: uint16
            length: {SEQ + 1}
          splits:
          - name: train
            num_examples: 999999
        configs:
        - config_name: default
          data_files:
          - split: train
            path: train.bin
          seq_length: {SEQ}
        ---
        """))
    with pytest.raises(datasets.exceptions.NonMatchingSplitsSizesError):
        load_dataset(str(folder), cache_dir=cache)
    load_dataset(str(folder), cache_dir=cache, verification_mode="no_checks")


def test_streaming_over_http_reads_ranges_not_whole_files(tmp_path, cache, random_documents):
    require_remote_extra()
    rng = np.random.default_rng(3)
    big = random_documents(rng, rng.integers(200, 2000, size=6000))
    prefix = write_documents(tmp_path / "served" / "train_text_document", big, dtype=np.uint16)
    bin_size = os.path.getsize(prefix + ".bin")
    with RangeServer(tmp_path / "served") as server:
        stream = load_dataset("mmidx", data_files={"train": server.url + "/train_text_document.bin"},
                              seq_length=SEQ, seed=SEED, streaming=True, cache_dir=cache, split="train")
        got = []
        for example in stream.take(20):
            got.append(example["input_ids"])
        sent = server.sent.get("train_text_document.bin", 0)
        whole = server.whole_files_sent.get("train_text_document.bin", 0)
    expected, _, _ = expected_samples([prefix])
    np.testing.assert_array_equal(np.array(got), expected[:20])
    # The .idx is read whole; of the .bin only ranges (one table of 1,000 short samples here).
    assert whole == 0, "the .bin was downloaded whole"
    assert 0 < sent < bin_size / 4, f"{sent} of {bin_size} bytes of .bin sent in ranges for 20 samples"


def test_edited_package_source_changes_the_cache_hash(corpus, cache, monkeypatch):
    root, _ = corpus
    before = load_dataset_builder(str(root), seq_length=SEQ, cache_dir=cache).cache_dir
    from mmidx_builder.hf import registry

    monkeypatch.setattr(registry, "package_source_hash", lambda: "edited")
    after = load_dataset_builder(str(root), seq_length=SEQ, cache_dir=cache).cache_dir
    assert before != after


# --- raw files (n_bytes) ---------------------------------------------------------------

@pytest.fixture(scope="module")
def raw_folder(tmp_path_factory):
    """Byte files in two class folders, with sizes that are not multiples of 2 or 3, and an empty one."""
    root = tmp_path_factory.mktemp("raw")
    rng = np.random.default_rng(5)
    for label, sizes in {"cat": [0, 1001, 77], "dog": [4099, 10, 333]}.items():
        (root / label).mkdir()
        for i, size in enumerate(sizes):
            (root / label / f"{i}.dat").write_bytes(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
    return root


def _file_tokens(path, n_bytes):
    data = path.read_bytes()
    data += b"\0" * (-len(data) % n_bytes)
    as_int = np.frombuffer(data, np.uint8).reshape(-1, n_bytes).astype(np.int64)
    return (as_int << (8 * np.arange(n_bytes))).sum(axis=1)


@pytest.mark.parametrize("n_bytes", [1, 2, 3])
def test_raw_concat_packs_files_like_megatron(raw_folder, cache, n_bytes):
    files = sorted(str(p) for p in raw_folder.rglob("*.dat"))
    ds = load_dataset("mmidx", data_files={"train": files}, n_bytes=n_bytes, seq_length=SEQ, seed=SEED,
                      num_epochs=2, cache_dir=cache, split="train")
    # The expected stream, written independently: each file's integers, then EOF.
    eof = 2 ** (8 * n_bytes)
    streams = [np.append(_file_tokens(raw_folder / os.path.relpath(f, raw_folder), n_bytes), eof) for f in files]
    lengths = np.array([len(t) for t in streams], np.int32)
    indices = sampling.build_indices(lengths, seq_length=SEQ, seed=SEED, num_epochs=2)
    got = column(ds)
    assert got.shape == (indices.num_samples, SEQ + 1)
    for row, (begin, end) in zip(got[:50], _sample_spans(indices)):
        np.testing.assert_array_equal(row, np.concatenate([streams[d][a:b] for d, a, b in _walk(indices, lengths, begin, end)]))


def _sample_spans(indices):
    for i in range(indices.num_samples):
        j = int(indices.shuffle_index[i])
        yield tuple(indices.sample_index[j]), tuple(indices.sample_index[j + 1])


def _walk(indices, lengths, begin, end):
    """(document, start, stop) pieces of one sample, from the sample index, plainly."""
    extra = int(indices.add_extra_token)
    (first, offset), (last, end_offset) = begin, end
    for position in range(first, last + 1):
        document = int(indices.document_index[position])
        start = offset if position == first else 0
        stop = end_offset + extra if position == last else int(lengths[document])
        yield document, start, stop


def test_raw_diff_rows_carry_file_path_and_folder_label(raw_folder, cache):
    ds = load_dataset("mmidx", data_dir=str(raw_folder), data_files={"train": "**/*.dat"}, n_bytes=1,
                      style="diff", seq_length=SEQ, cache_dir=cache, split="train")
    assert ds.features["label"].names == ["cat", "dog"]
    by_path = {}
    for row in ds:
        by_path.setdefault(row["path"], []).append(row)
    assert len(by_path) == 6
    for path, file_rows in by_path.items():
        expected = np.append(_file_tokens(raw_folder / os.path.relpath(path, raw_folder), 1), 256)
        padded = np.full(-(-len(expected) // SEQ) * SEQ, 256)
        padded[:len(expected)] = expected
        np.testing.assert_array_equal(np.concatenate([r["input_ids"] for r in file_rows]), padded)
        assert {ds.features["label"].int2str(r["label"]) for r in file_rows} == {os.path.basename(os.path.dirname(path))}


def test_raw_streaming_equals_prepared(raw_folder, cache):
    options = dict(data_files={"train": sorted(str(p) for p in raw_folder.rglob("*.dat"))}, n_bytes=2,
                   seq_length=SEQ, seed=SEED, cache_dir=cache, split="train")
    prepared = column(load_dataset("mmidx", **options))
    np.testing.assert_array_equal(rows(load_dataset("mmidx", streaming=True, **options)), prepared)


def test_raw_files_stream_from_http(raw_folder, cache):
    require_remote_extra()
    files = sorted(p.relative_to(raw_folder).as_posix() for p in raw_folder.rglob("*.dat"))
    options = dict(n_bytes=2, seq_length=SEQ, seed=SEED, cache_dir=cache, split="train")
    local = column(load_dataset("mmidx", data_files={"train": [str(raw_folder / f) for f in files]}, **options))
    with RangeServer(raw_folder) as server:
        remote = rows(load_dataset("mmidx", data_files={"train": [f"{server.url}/{f}" for f in files]},
                                   streaming=True, **options))
    # These files are a few KB: fsspec's existence probe alone fetches them whole, so only the
    # tokens are checked here (ranged reads are checked on a large .bin above).
    np.testing.assert_array_equal(remote, local)


def test_raw_diff_labels_from_a_metadata_file(tmp_path, cache):
    rng = np.random.default_rng(6)
    names = {"a.dat": "spam", "b.dat": "ham", "c.dat": "spam"}
    for name in names:
        (tmp_path / name).write_bytes(rng.integers(0, 256, size=40, dtype=np.uint8).tobytes())
    (tmp_path / "metadata.csv").write_text("file_name,label\n" + "".join(f"{n},{l}\n" for n, l in names.items()))
    files = [str(tmp_path / n) for n in names] + [str(tmp_path / "metadata.csv")]
    ds = load_dataset("mmidx", data_files={"train": files}, n_bytes=1, style="diff", seq_length=SEQ,
                      cache_dir=cache, split="train")
    assert ds.features["label"].names == ["ham", "spam"]
    for row in ds:
        assert ds.features["label"].int2str(row["label"]) == names[os.path.basename(row["path"])]


# --- fairseq language pairs ------------------------------------------------------------

@pytest.fixture(scope="module")
def fairseq_folder(tmp_path_factory):
    """fairseq-preprocess output: train (+ train1 shard) and valid, dictionaries, fairseq flavour."""
    root = tmp_path_factory.mktemp("fairseq")
    symbols = ["\u2581hallo", "\u2581welt", "\u2581hello", "\u2581world", "!"]
    for lang in ("de", "en"):
        (root / f"dict.{lang}.txt").write_text("".join(f"{w} {100 - i}\n" for i, w in enumerate(symbols)))
    rng = np.random.default_rng(9)
    written = {}
    for name, count in (("train", 23), ("train1", 7), ("valid", 5)):
        sides = {lang: [np.append(rng.integers(4, 9, size=rng.integers(0, 6)), 2) for _ in range(count)]
                 for lang in ("de", "en")}
        for lang, sentences in sides.items():
            with IndexedFileWriter(root / f"{name}.de-en.{lang}", dtype=np.uint16, flavour="fairseq") as writer:
                for sentence in sentences:
                    writer.add_document(sentence)
        written[name] = sides
    return root, written, symbols


def test_fairseq_pairs_load_as_sentence_pairs(fairseq_folder, cache):
    root, written, _ = fairseq_folder
    ds = load_dataset(str(root), cache_dir=cache)
    assert set(ds) == {"train", "validation"}
    train = ds["train"]
    sources = written["train"]["de"] + written["train1"]["de"]
    targets = written["train"]["en"] + written["train1"]["en"]
    assert train.num_rows == len(sources) and train["id"][:] == list(range(len(sources)))
    for row, source, target in zip(train, sources, targets):
        assert row["source"] == source.tolist() and row["target"] == target.tolist()
    stream = load_dataset(str(root), cache_dir=cache, streaming=True, split="validation")
    assert [r["target"] for r in stream] == [t.tolist() for t in written["valid"]["en"]]


def test_fairseq_pairs_reverse_direction_upsampling_and_text(fairseq_folder, cache):
    root, written, symbols = fairseq_folder
    ds = load_dataset(str(root), source_lang="en", target_lang="de", upsample_primary=2, decode_text=True,
                      bpe="sentencepiece", cache_dir=cache, split="train")
    primary, extra = written["train"], written["train1"]
    assert ds.num_rows == 2 * len(primary["en"]) + len(extra["en"])
    order = primary["en"] + primary["en"] + extra["en"]
    assert [r["source"] for r in ds] == [s.tolist() for s in order]
    first = ds[0]
    words = [symbols[i - 4] for i in primary["en"][0][:-1]]
    assert first["source_text"] == "".join(words).replace("\u2581", " ").strip()


# --- errors ---------------------------------------------------------------------------

def test_folder_without_pairs(tmp_path, cache):
    (tmp_path / "notes.bin").write_bytes(b"")
    with pytest.raises(MMIdxError, match="notes"):
        load_dataset(str(tmp_path), seq_length=SEQ, cache_dir=cache)


def test_no_data_files(cache):
    with pytest.raises(ParameterError, match="data_files"):
        MMIdx(seq_length=SEQ, cache_dir=cache).download_and_prepare()


def test_unpaired_idx_in_data_files(corpus, tmp_path, cache):
    _, prefixes = corpus
    os.link(prefixes["validation"][0] + ".idx", tmp_path / "lonely.idx")
    with pytest.raises(MissingPartnerError, match="lonely"):
        load_dataset("mmidx", data_files=str(tmp_path / "lonely.idx"), seq_length=SEQ, cache_dir=cache)


def test_unpaired_bin(corpus, tmp_path, cache):
    _, prefixes = corpus
    os.link(prefixes["validation"][0] + ".bin", tmp_path / "train.bin")
    with pytest.raises(MissingPartnerError, match=r"train\.idx"):
        load_dataset(str(tmp_path), seq_length=SEQ, cache_dir=cache)


def test_mixed_dtypes_in_one_split(tmp_path, cache, random_documents):
    rng = np.random.default_rng(1)
    write_documents(tmp_path / "train-a", random_documents(rng, [5] * 20, vocab=3000), dtype=np.uint16)
    write_documents(tmp_path / "train-b", random_documents(rng, [5] * 20, vocab=3000), dtype=np.int32)
    with pytest.raises(ParameterError, match="dtype"):
        load_dataset(str(tmp_path), seq_length=SEQ, cache_dir=cache)


def test_seq_length_larger_than_the_split(tmp_path, cache):
    write_documents(tmp_path / "train", [[1, 2, 3], [4, 5]], dtype=np.uint16)
    with pytest.raises(ParameterError, match="seq_length"):
        load_dataset(str(tmp_path), seq_length=SEQ, cache_dir=cache)


@pytest.mark.parametrize("kwargs", [{"seq_length": 0}, {"num_epochs": 2, "num_samples": 5}, {"seed": -1},
                                    {"num_samples": 0}, {"n_bytes": 5}, {"seq_length": "16"},
                                    {"dtype": "float32"}])
def test_bad_config_values(corpus, cache, kwargs):
    root, _ = corpus
    with pytest.raises(ParameterError):
        load_dataset(str(root), cache_dir=cache, **{"seq_length": SEQ, **kwargs})
