"""fairseq translation data read back as fairseq 0.12 would return it.

These tests need no fairseq: the pairs are written in its flavour by our writer, the way
fairseq-preprocess lays them out (one sequence per sentence, EOS last, uint16 ids), and the
expectations are spelled out from fairseq's code: Dictionary.add_from_file,
load_langpair_dataset, ConcatDataset and LanguagePairDataset.__getitem__. fairseq itself is
the oracle in test_fairseq_oracle.py; batches are tested in test_fairseq_batches.py.
"""

import numpy as np
import pytest

from mmidx_builder.errors import FormatError, MissingPartnerError, ParameterError
from mmidx_builder.fairseq import Dictionary, LanguagePairs, find_language_pairs, pair_tables
from mmidx_builder.sources.indexed import Flavour, IndexedFile, IndexedFileWriter

WORDS = ["\u2581the", "\u2581cat", "s", "\u2581sat", "\u2581on", "\u2581mat", "\u2581Haus", "\u2581das", "\u2581ist",
         "\u2581klein", "\u2581a", "\u2581b"]


def write_dictionary(path, symbols):
    path.write_text("".join(f"{s} {100 - i}\n" for i, s in enumerate(symbols)), encoding="utf-8")
    return path


def random_sentences(rng, count, dictionary, max_words=9):
    """Token ids as fairseq-preprocess writes them: dictionary ids then EOS (2); some
    sentences empty (EOS only), some holding an id past the dictionary (decoded as <unk>)."""
    sentences = []
    for _ in range(count):
        words = rng.integers(4, len(dictionary) + 1, rng.integers(0, max_words + 1))
        sentences.append(np.append(words, dictionary.eos_index).astype(np.int64))
    return sentences


def write_side(prefix, sentences):
    # fairseq's best_fitting_int_dtype: uint16 for any dictionary below 65,500 symbols.
    with IndexedFileWriter(prefix, dtype=np.uint16, flavour=Flavour.FAIRSEQ) as writer:
        for s in sentences:
            writer.add_document(s)


@pytest.fixture
def corpus(tmp_path):
    """de->en with train, train1, train2 (combined), valid and valid1 (kept apart), test;
    17, 5, 0 (an empty shard), 4, 3 and 1 pairs."""
    rng = np.random.default_rng(11)
    write_dictionary(tmp_path / "dict.de.txt", WORDS)
    write_dictionary(tmp_path / "dict.en.txt", WORDS)
    dictionary = Dictionary.load(tmp_path / "dict.de.txt")
    data = {}
    for name, count in (("train", 17), ("train1", 5), ("train2", 0), ("valid", 4), ("valid1", 3), ("test", 1)):
        source = random_sentences(rng, count, dictionary)
        target = random_sentences(rng, count, dictionary)
        write_side(tmp_path / f"{name}.de-en.de", source)
        write_side(tmp_path / f"{name}.de-en.en", target)
        data[name] = (source, target)
    return tmp_path, data


# --- dictionary ----------------------------------------------------------------------------

def test_dictionary_loads_as_fairseq_numbers_it(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("hello 5\nworld 3\nNew York 2\nhello 1 #fairseq:overwrite\n\u2581x 0\n", encoding="utf-8")
    d = Dictionary.load(path)
    assert (d.bos_index, d.pad_index, d.eos_index, d.unk_index) == (0, 1, 2, 3)
    assert d.symbols[:4] == ["<s>", "<pad>", "</s>", "<unk>"]
    assert d.symbols[4:] == ["hello", "world", "New York", "hello", "\u2581x"]
    assert d.counts[4:] == [5, 3, 2, 1, 0]
    # Overwrite gives the word a new id; the old id still decodes to it.
    assert d.index("hello") == 7 and d[4] == "hello"
    assert d.index("nope") == d.unk_index and d[999] == "<unk>"
    assert len(d) == 9


@pytest.mark.parametrize("line", ["lonely", "word many", "", "a 1 2x", "dup 3"])
def test_a_bad_dictionary_line_names_file_and_line(tmp_path, line):
    path = tmp_path / "dict.en.txt"
    path.write_text(f"dup 1\nok 2\n{line}\nafter 1\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"dict\.en\.txt: line 3"):
        Dictionary.load(path)


def test_dictionary_round_trip(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("b 9\na 9\nwith space 4\nb 1 #fairseq:overwrite\n<s> 1 #fairseq:overwrite\n", encoding="utf-8")
    d = Dictionary.load(path)
    d.save(tmp_path / "again.txt")
    again = Dictionary.load(tmp_path / "again.txt")
    assert again.symbols == d.symbols and again.counts == d.counts and again == d


def test_decode_joins_sentencepiece_pieces_as_fairseq_string_does(tmp_path):
    d = Dictionary.load(write_dictionary(tmp_path / "dict.txt", ["\u2581Hel", "lo", "\u2581wor", "ld", "!"]))
    ids = [d.bos_index] + [d.index(p) for p in ["\u2581Hel", "lo", "\u2581wor", "ld", "!"]] + [d.eos_index]
    assert d.string(ids, "sentencepiece") == "Hello world!"
    assert d.string(ids) == "\u2581Hel lo \u2581wor ld !"
    assert d.string([d.index("\u2581Hel"), 999, d.unk_index], "sentencepiece") == "Hel<unk><unk>"
    assert d.string(ids, include_eos=True) == "\u2581Hel lo \u2581wor ld ! </s>"
    subword = Dictionary.load(write_dictionary(tmp_path / "bpe.txt", ["un@@", "believ@@", "able", "news"]))
    assert subword.string(subword.encode(["un@@", "believ@@", "able", "news"]), "subword_nmt") == "unbelievable news"
    with pytest.raises(ParameterError):
        d.string([4], "klingon")


# --- finding and reading pairs ----------------------------------------------------------------

def test_find_language_pairs_combines_train_shards_only(corpus):
    folder, _ = corpus
    found = find_language_pairs(folder)
    assert sorted(found) == ["test", "train", "valid", "valid1"]
    assert [(s.shard, s.source_prefix) for s in found["train"]] == [
        (0, str(folder / "train.de-en.de")), (1, str(folder / "train1.de-en.de")), (2, str(folder / "train2.de-en.de"))]
    assert all((s.src, s.tgt) == ("de", "en") for shards in found.values() for s in shards)
    assert found["train"][1].target_prefix == str(folder / "train1.de-en.en")
    # The .bin files alone (as data_files lists them) name the same pairs.
    bins = sorted(str(p) for p in folder.glob("*.bin"))
    assert find_language_pairs(bins) == found
    assert find_language_pairs(bins + sorted(str(p) for p in folder.glob("*.idx"))) == found


@pytest.mark.parametrize("upsample", (1, 3))
def test_pairs_are_fairseqs_concatenation_with_upsampled_primary(corpus, upsample):
    folder, data = corpus
    pairs = LanguagePairs.open(find_language_pairs(folder)["train"], upsample_primary=upsample)
    # ConcatDataset([train, train1, train2], sample_ratios=[upsample, 1, 1]).
    expected = list(zip(*data["train"])) * upsample + list(zip(*data["train1"])) + list(zip(*data["train2"]))
    assert pairs.num_pairs == len(expected) == 17 * upsample + 5
    for i, (source, target) in enumerate(expected):
        got_source, got_target = pairs[i]
        assert got_source.dtype == np.int64
        np.testing.assert_array_equal(got_source, source)
        np.testing.assert_array_equal(got_target, target)
    np.testing.assert_array_equal(pairs.source_sizes, [len(s) for s, _ in expected])
    np.testing.assert_array_equal(pairs.target_sizes, [len(t) for _, t in expected])


def test_a_split_of_one_shard_is_never_upsampled(corpus):
    folder, data = corpus
    # load_langpair_dataset makes a ConcatDataset (with sample ratios) only from several shards.
    pairs = LanguagePairs.open(find_language_pairs(folder)["valid"], upsample_primary=3)
    assert pairs.num_pairs == len(data["valid"][0]) == 4
    np.testing.assert_array_equal(pairs[3][1], data["valid"][1][3])


def test_pair_tables_hold_the_pairs_and_their_text(corpus):
    folder, data = corpus
    pairs = LanguagePairs.open(find_language_pairs(folder)["train"], upsample_primary=2)
    dictionaries = (Dictionary.load(folder / "dict.de.txt"), Dictionary.load(folder / "dict.en.txt"))
    tables = list(pair_tables(pairs, start=3, stop=None, batch_size=7, dictionaries=dictionaries,
                              bpe="sentencepiece"))
    assert [t.num_rows for t in tables] == [7, 7, 7, 7, 7, 1]  # 17 * 2 + 5 - 3 rows
    rows = [row for t in tables for row in t.to_pylist()]
    assert [r["id"] for r in rows] == list(range(3, pairs.num_pairs))
    assert str(tables[0].schema.field("source").type) == "list<item: uint16>"
    for row in rows:
        source, target = pairs[row["id"]]
        assert row["source"] == source.tolist() and row["target"] == target.tolist()
        words = [dictionaries[0][i] for i in source if i > 3]
        unknown = [i for i in source if i == 3 or i >= len(dictionaries[0])]
        if not unknown:
            assert row["source_text"] == "".join(words).replace("\u2581", " ").strip()
    plain = next(pair_tables(pairs, 0, 2))
    assert plain.column_names == ["id", "source", "target"]


def test_reverse_direction_names_are_accepted(corpus):
    folder, data = corpus
    found = find_language_pairs(folder, src="en", tgt="de")
    assert found["train"][0].source_prefix == str(folder / "train.de-en.en")
    pairs = LanguagePairs.open(found["valid"])
    source, target = pairs[2]
    np.testing.assert_array_equal(source, data["valid"][1][2])
    np.testing.assert_array_equal(target, data["valid"][0][2])


def test_a_source_without_its_target_is_named(corpus):
    folder, _ = corpus
    for ext in ("bin", "idx"):
        (folder / f"valid.de-en.en.{ext}").unlink()
    with pytest.raises(MissingPartnerError, match=r"valid\.de-en\.en"):
        find_language_pairs(folder)


def test_a_target_without_its_source_is_named(corpus):
    folder, _ = corpus
    for ext in ("bin", "idx"):
        (folder / f"test.de-en.de.{ext}").unlink()
    with pytest.raises(MissingPartnerError, match=r"test\.de-en\.de"):
        find_language_pairs(folder)


def test_a_bin_without_idx_is_named(corpus):
    folder, _ = corpus
    (folder / "test.de-en.de.idx").unlink()
    with pytest.raises(MissingPartnerError, match=r"test\.de-en\.de\.idx"):
        find_language_pairs(folder)


def test_sides_of_different_lengths_are_refused(corpus):
    folder, data = corpus
    write_side(folder / "valid.de-en.en", data["valid"][1][:-1])
    with pytest.raises(FormatError, match=r"valid\.de-en\.en\.idx.*valid\.de-en\.de\.idx"):
        LanguagePairs.open(find_language_pairs(folder)["valid"])


def test_several_pairs_need_the_languages_named(corpus):
    folder, data = corpus
    write_side(folder / "train.fr-en.fr", data["test"][0])
    write_side(folder / "train.fr-en.en", data["test"][1])
    with pytest.raises(ParameterError, match="several language pairs"):
        find_language_pairs(folder)
    assert find_language_pairs(folder, "fr", "en")["train"][0].source_prefix == str(folder / "train.fr-en.fr")


# --- files -------------------------------------------------------------------------------------

def test_files_written_by_the_writer_are_fairseq_flavour(corpus):
    folder, _ = corpus
    f = IndexedFile.open(folder / "train.de-en.de")
    assert f.flavour is Flavour.FAIRSEQ and f.dtype == np.uint16


@pytest.mark.parametrize("settings,message", [
    ({"prepend_bos": "yes"}, "prepend_bos= must be True or False"),
    ({"truncate_source": True, "max_source_positions": 0}, "max_source_positions= must be at least 1, got 0"),
])
def test_bad_item_options_are_named(corpus, settings, message, tmp_path):
    from datasets import load_dataset

    folder, _ = corpus
    with pytest.raises(ParameterError, match=message):
        load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"), **settings)


def test_item_options_change_rows_as_spelled_out(corpus, tmp_path):
    """load_langpair_dataset's wrappers written out: <s> first, the source cut to
    max_source_positions - 1 tokens (EOS stripped first) then EOS, [de]/[en] (here <unk>) last."""
    from datasets import load_dataset

    folder, data = corpus
    ds = load_dataset(str(folder), split="validation", prepend_bos=True, truncate_source=True,
                      max_source_positions=4, append_source_id=True, cache_dir=str(tmp_path / "cache"))
    for row, source, target in zip(ds, *data["valid"]):
        stripped = source[:-1] if source[-1] == 2 else source
        assert row["source"] == [0, *stripped[:3].tolist(), 2, 3]
        assert row["target"] == [0, *target.tolist(), 3]
