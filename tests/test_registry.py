"""One test per datasets-internal entry the registry touches: a datasets upgrade that moves
or renames one of them fails here, naming it, instead of failing users."""

import subprocess
import sys

import numpy as np
import pytest

import datasets.load
import datasets.packaged_modules as packaged

import mmidx_builder
from mmidx_builder.sources.indexed import IndexedFileWriter
from mmidx_builder.hf import registry
from mmidx_builder.hf.registry import BUILDER_MODULES, FRONT_DOOR


def test_packaged_module_entries_point_at_the_builder_modules():
    for name in BUILDER_MODULES:
        module_path, code_hash = packaged._PACKAGED_DATASETS_MODULES[name]
        assert module_path == f"mmidx_builder.hf.{name}" and code_hash == registry.package_source_hash()
        builder = datasets.load.import_main_class(module_path)
        assert builder.__module__ == module_path, name
    assert datasets.load.import_main_class("mmidx_builder.hf.mmidx") is mmidx_builder.MMIdx


def test_load_py_sees_the_same_tables_not_copies():
    # load.py imports these names at its own import time: registration must mutate them.
    for name in ("_PACKAGED_DATASETS_MODULES", "_EXTENSION_TO_MODULE", "_MODULE_TO_EXTENSIONS",
                 "_MODULE_TO_METADATA_EXTENSIONS", "_MODULE_TO_METADATA_FILE_NAMES", "_ALL_ALLOWED_EXTENSIONS"):
        assert getattr(datasets.load, name) is getattr(packaged, name), name


def test_bin_and_mds_extensions_map_to_the_front_door_and_idx_is_left_to_lance():
    for ext in (".bin", ".mds"):
        assert packaged._EXTENSION_TO_MODULE[ext] == (FRONT_DOOR, {})
        assert ext in packaged._ALL_EXTENSIONS and ext in packaged._ALL_ALLOWED_EXTENSIONS
    for name in BUILDER_MODULES:
        assert packaged._MODULE_TO_EXTENSIONS[name] == [".bin", ".mds", ".zip"]
        assert packaged._MODULE_TO_METADATA_EXTENSIONS[name] == []
        # MosaicML's index.json is kept among a folder's files by name (.json is JSON's).
        assert packaged._MODULE_TO_METADATA_FILE_NAMES[name] == ["index.json"]
    assert packaged._EXTENSION_TO_MODULE.get(".idx", (None,))[0] not in BUILDER_MODULES


def test_registration_is_idempotent():
    before = (list(packaged._ALL_EXTENSIONS), list(packaged._ALL_ALLOWED_EXTENSIONS))
    registry.register()
    assert (list(packaged._ALL_EXTENSIONS), list(packaged._ALL_ALLOWED_EXTENSIONS)) == before


def test_folder_module_inference_picks_the_front_door(tmp_path):
    with IndexedFileWriter(tmp_path / "train", dtype=np.uint16) as writer:
        writer.add_document(list(range(50)))
    module = datasets.load.dataset_module_factory(str(tmp_path))
    assert module.module_path == "mmidx_builder.hf.mmidx"
    (config,) = module.builder_configs_parameters.builder_configs
    assert [str(f).rsplit("/", 1)[-1] for f in config.data_files["train"]] == ["train.bin"]


def test_named_module_factory(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"")
    module = datasets.load.dataset_module_factory(FRONT_DOOR, data_files={"train": str(tmp_path / "x.bin")})
    assert module.module_path == "mmidx_builder.hf.mmidx"


def _run(code: str, cwd) -> subprocess.CompletedProcess:
    # HF_HUB_OFFLINE: an unknown name must fail at once, not after Hub retries.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_without_the_import_the_builder_is_unknown_and_with_it_known(tmp_path):
    """The registration is what makes it work: the same call in a fresh interpreter fails
    without the import (datasets does not know the name) and succeeds with it."""
    IndexedFileWriter(tmp_path / "x", dtype=np.uint16).close()
    with IndexedFileWriter(tmp_path / "x", dtype=np.uint16) as writer:
        writer.add_document(list(range(40)))
    call = "ds = datasets.load_dataset('mmidx', data_files='x.bin', seq_length=8, split='train', cache_dir='c')"
    without = _run(f"import datasets; {call}", tmp_path)
    assert without.returncode != 0 and "mmidx" in without.stderr
    with_import = _run(f"import mmidx_builder, datasets; {call}; print(ds.num_rows)", tmp_path)
    assert with_import.returncode == 0, with_import.stderr
    assert with_import.stdout.split()[-1] == str((40 - 1) // 8)


def test_import_order_does_not_matter(tmp_path):
    """Registration waits for datasets when the package is imported first, and is immediate
    when datasets was imported first."""
    check = ("import datasets.packaged_modules as p; "
             "assert p._PACKAGED_DATASETS_MODULES['mmidx'][0] == 'mmidx_builder.hf.mmidx'")
    for code in (f"import mmidx_builder; import datasets; {check}", f"import datasets; import mmidx_builder; {check}"):
        result = _run(code, tmp_path)
        assert result.returncode == 0, result.stderr


def test_the_format_layer_does_not_import_datasets(tmp_path):
    result = _run("import sys, mmidx_builder.sources.indexed, mmidx_builder.megatron.sampling, mmidx_builder.sources.raw; "
                  "print(sorted(m for m in sys.modules if m.split('.')[0] in ('datasets', 'pyarrow', 'torch')))",
                  tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_named_builder_never_scans_the_working_directory(tmp_path):
    """load_dataset("mmidx") without data_files: datasets would scan the current folder and
    take whatever .bin files are there. Ours says what it needs instead, in any folder."""
    with IndexedFileWriter(tmp_path / "unrelated", dtype=np.uint16) as writer:
        writer.add_document(list(range(50)))
    for folder in (tmp_path, tmp_path / "empty"):
        folder.mkdir(exist_ok=True)
        result = _run("import mmidx_builder, datasets\n"
                      "try:\n    datasets.load_dataset('mmidx', seq_length=8, cache_dir='c')\n"
                      "except Exception as e:\n    print(type(e).__name__, e)", folder)
        assert result.stdout.startswith("ParameterError no data files"), result.stdout + result.stderr


# --- one place decides whether a folder is ours (issue 20, item 2) ---------------------------

def _published_folder(folder, write_corpus, extra_files):
    """A tokenized corpus as people share it: the pairs, and beside them the tokenizer files
    (or notes) that datasets would otherwise take for the data."""
    rng = np.random.default_rng(5)
    documents = [rng.integers(0, 50_000, int(n)).tolist() for n in rng.integers(1, 40, 57)]
    # Named as Megatron's preprocess_data names them, so every file lands in datasets' "train".
    write_corpus(folder, {"corpus_text_document": documents, "more_text_document": documents[:20]})
    for name, text in extra_files.items():
        (folder / name).write_text(text)
    return folder


TOKENIZER_FILES = {"tokenizer.json": '{"version": "1.0", "model": {"type": "BPE"}}',
                   "tokenizer_config.json": '{"eos_token": "<|endoftext|>"}',
                   "special_tokens_map.json": '{"eos_token": "<|endoftext|>"}'}


def test_a_folder_published_with_its_tokenizer_is_ours(tmp_path, write_corpus):
    """datasets counts extensions: three .json beat one .bin, and a .txt beats a .bin on the
    alphabet. With pairs in the folder the other files are ignored, and the rows are those of
    the pairs alone."""
    plain = _published_folder(tmp_path / "plain", write_corpus, {})
    expected = datasets.load_dataset(str(plain), seq_length=8, cache_dir=str(tmp_path / "c0"))
    for i, extra in enumerate((TOKENIZER_FILES, {"NOTES.txt": "made with mmidx convert\n"},
                               {**TOKENIZER_FILES, "NOTES.txt": "notes\n", "README.md": "# a corpus\n\nno card yet\n"})):
        folder = _published_folder(tmp_path / f"published{i}", write_corpus, extra)
        loaded = datasets.load_dataset(str(folder), seq_length=8, cache_dir=str(tmp_path / f"c{i + 1}"))
        assert list(loaded) == ["train"], extra
        assert loaded["train"]["input_ids"] == expected["train"]["input_ids"], extra
        stream = datasets.load_dataset(str(folder), seq_length=8, split="train", streaming=True)
        assert [row["input_ids"] for row in stream] == expected["train"]["input_ids"]


def _loads_of(folder, parent, seq_length, cache):
    """Every way of naming a folder of pairs to load_dataset: (what, kwargs); each loads train."""
    common = dict(seq_length=seq_length, split="train", cache_dir=str(cache))
    rel = folder.relative_to(parent).as_posix()
    return [("folder", dict(path=str(folder))),
            ("folder, data_files='*'", dict(path=str(folder), data_files="*")),
            ("parent, data_dir=", dict(path=str(parent), data_dir=rel)),
            ("'mmidx', data_dir=", dict(path="mmidx", data_dir=str(folder))),
            ("'mmidx', data_files='folder/*'", dict(path="mmidx", data_files=str(folder / "*"))),
            ("'mmidx', data_files={'train': 'folder/*'}", dict(path="mmidx", data_files={"train": str(folder / "*")})),
            ("'mmidx', data_files='folder/**'", dict(path="mmidx", data_files=str(folder / "**"))),
            ], common


def test_convert_output_with_its_card_and_tokenizer_loads_in_every_form(tmp_path):
    """Issue 40 item 2: what `mmidx convert` writes (the pair and its .mmidx-info sidecar), with
    the tokenizer files, a card and its histogram beside it, loads the same rows whether the
    folder is given, or data_dir=, or a pattern of all its files (the sidecar was refused as
    "neither a .bin nor an .idx file"); and a Megatron prefix of it too. Streaming and prepared."""
    from mmidx_builder.convert import convert
    from mmidx_builder.publishing.card import CardSettings, write_card

    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(f'{{"text": "{"document %d " % i * (i % 7 + 1)}"}}\n' for i in range(60)))
    corpus = tmp_path / "corpus"
    convert([str(texts)], str(corpus / "train"), "bytes", append_eod=True)
    for name, text in TOKENIZER_FILES.items():
        (corpus / name).write_text(text)
    seq_length = 32
    loads, common = _loads_of(corpus, tmp_path, seq_length, tmp_path / "cache")
    expected = datasets.load_dataset(str(corpus), **common)["input_ids"]
    assert len(expected) > 10
    for stage in ("converted", "with a card"):
        if stage == "with a card":
            write_card(corpus, CardSettings(seq_length=seq_length))
        names = sorted(p.name for p in corpus.iterdir())
        assert "train_text_document.mmidx-info" in names and ("README.md" in names) == (stage == "with a card")
        for what, kwargs in loads:
            for streaming in (False, True):
                try:
                    loaded = datasets.load_dataset(**kwargs, **common, streaming=streaming)
                except Exception as error:
                    raise AssertionError(f"{stage}, {what}, streaming={streaming}: {error}") from error
                assert [row["input_ids"] for row in loaded] == expected, (stage, what, streaming)
        prefix = str(corpus / "train_text_document")
        blend = datasets.load_dataset("mmidx", data_path=[prefix], split_ratios="1,0,0", num_samples={"train": 5},
                                      seq_length=seq_length, cache_dir=str(tmp_path / "cache"), split="train")
        assert blend.num_rows == 5


def test_our_fairseq_preprocess_output_loads_in_every_form(tmp_path):
    """The same for `mmidx fairseq-preprocess`'s data-bin: its dict.{lang}.txt lie beside the
    pairs, and a pattern of all its files must still be fairseq pairs, not GPT samples."""
    from mmidx_builder.fairseq.preprocess import preprocess

    text = tmp_path / "text"
    text.mkdir()
    rng = np.random.default_rng(8)
    for lang in ("de", "en"):
        lines = [" ".join(f"{lang}{w}" for w in rng.integers(0, 30, int(n))) for n in rng.integers(1, 9, 40)]
        (text / f"train.{lang}").write_text("\n".join(lines) + "\n")
    folder = tmp_path / "data-bin"
    preprocess(source_lang="de", target_lang="en", trainpref=str(text / "train"), destdir=str(folder))
    assert {"dict.de.txt", "dict.en.txt"} <= {p.name for p in folder.iterdir()}
    loads, common = _loads_of(folder, tmp_path, None, tmp_path / "cache")
    del common["seq_length"]
    expected = datasets.load_dataset(str(folder), **common)
    assert list(expected.features) == ["id", "source", "target"]
    for what, kwargs in loads:
        loaded = datasets.load_dataset(**kwargs, **common, streaming=True)
        assert [row["source"] for row in loaded] == expected["source"], what
    # a pattern given with the folder matched pair files only: the kind is chosen on them (it
    # was chosen on the pattern's text, and the pairs were read as GPT samples)
    only_pairs = datasets.load_dataset(str(folder), data_files="train.de-en.*", **common)
    assert only_pairs["source"] == expected["source"]


def test_a_folder_without_pairs_keeps_datasets_rule(tmp_path):
    """Only pairs make a folder ours: a lone .bin (a model's weights) beside JSON stays JSON."""
    (tmp_path / "pytorch_model.bin").write_bytes(b"\0" * 64)
    (tmp_path / "a.json").write_text('{"text": "x"}\n')
    (tmp_path / "b.json").write_text('{"text": "y"}\n')
    module = datasets.load.dataset_module_factory(str(tmp_path))
    assert module.module_path.endswith(".json")
    assert not registry.holds_pairs([str(tmp_path / "pytorch_model.bin")])


def test_data_dir_alone_reaches_the_builder(tmp_path):
    """The README's raw-files call names the folder with data_dir and no data_files; the
    empty-pattern check must not need data_files (it raised TypeError)."""
    for label, size in (("cat", 300), ("dog", 500)):
        (tmp_path / "data" / label).mkdir(parents=True)
        (tmp_path / "data" / label / f"{size}.jpg").write_bytes(np.random.default_rng(size).bytes(size))
    by_dir = datasets.load_dataset("mmidx", data_dir=str(tmp_path / "data"), n_bytes=1, seq_length=64,
                                   style="diff", cache_dir=str(tmp_path / "c1"))
    by_files = datasets.load_dataset("mmidx", data_files={"train": str(tmp_path / "data" / "**")}, n_bytes=1,
                                     seq_length=64, style="diff", cache_dir=str(tmp_path / "c2"))
    assert by_dir["train"].num_rows == -(-301 // 64) + -(-501 // 64)
    assert by_dir["train"]["input_ids"] == by_files["train"]["input_ids"]


# --- the supported range: every internal used is checked at import ---------------------------

def test_every_internal_the_registry_lists_exists_in_the_installed_datasets():
    registry.check_internals(*registry.INTERNALS)  # raises, naming the missing ones
    for module_name, names in registry.INTERNALS.items():
        module = __import__(module_name, fromlist=["_"])
        for dotted in names:
            found = module
            for part in dotted.split("."):
                found = getattr(found, part)
            assert found is not None, f"{module_name}.{dotted}"


def test_pyproject_floor_is_the_registrys_oldest_release():
    import pathlib
    import re

    pyproject = (pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    (floor,) = re.findall(r'"datasets>=([\d.]+)"', pyproject)
    assert registry._release(floor) == registry._release(registry.OLDEST_DATASETS)[:len(registry._release(floor))]
    assert not re.search(r'"datasets[^"]*<', pyproject), "no upper bound on datasets"


def _tables_without(name):
    import types

    tables = {n: getattr(packaged, n) for n in registry.INTERNALS["datasets.packaged_modules"] if n != name}
    return types.SimpleNamespace(**tables)


@pytest.mark.parametrize("installed, advice", [
    ("4.0.0", "pip install -U 'datasets>=4.5.0'"),
    ("9.1.0", "this datasets release is newer than the ones this mmidx_builder knows"),
])
def test_a_datasets_without_a_table_is_refused_naming_version_range_and_what_to_do(monkeypatch, installed, advice):
    from mmidx_builder.errors import DatasetsVersionError

    monkeypatch.setattr(registry, "_installed_datasets", lambda: installed)
    with pytest.raises(DatasetsVersionError) as caught:
        registry.register(_tables_without("_ALL_ALLOWED_EXTENSIONS"))
    message = str(caught.value)
    assert message.startswith(f"mmidx_builder supports datasets 4.5.0 and newer; the installed datasets {installed} "
                              "lacks datasets.packaged_modules._ALL_ALLOWED_EXTENSIONS,")
    assert advice in message
    assert isinstance(caught.value, ImportError)


def test_the_check_runs_at_import(tmp_path):
    """A datasets lacking a table (here: one deleted after datasets' import, as 4.0-4.4 lack
    three) makes ``import mmidx_builder`` itself fail with the one error, not an AttributeError."""
    code = ("import datasets, datasets.packaged_modules as p\n"
            "del p._MODULE_TO_METADATA_EXTENSIONS\n"
            "import mmidx_builder\n")
    result = _run(code, tmp_path)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mmidx_builder.errors.DatasetsVersionError: mmidx_builder supports datasets 4.5.0 and "
                           f"newer; the installed datasets {datasets.__version__} lacks "
                           "datasets.packaged_modules._MODULE_TO_METADATA_EXTENSIONS"), result.stderr[-2000:]
