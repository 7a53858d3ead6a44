"""One test per datasets-internal entry the registry touches: a datasets upgrade that moves
or renames one of them fails here, naming it, instead of failing users."""

import importlib
import subprocess
import sys

import numpy as np
import pytest

import datasets.load
import datasets.packaged_modules as packaged

import mmidx_builder
from mmidx_builder.format import IndexedFileWriter
from mmidx_builder.registry import BUILDER_NAME


def test_packaged_module_entry_points_at_the_builder_module():
    module_path, code_hash = packaged._PACKAGED_DATASETS_MODULES[BUILDER_NAME]
    assert module_path == "mmidx_builder.mmidx" and code_hash == mmidx_builder.mmidx.PACKAGE_SOURCE_HASH
    assert datasets.load.import_main_class(module_path) is mmidx_builder.MMIdx


def test_load_py_sees_the_same_tables_not_copies():
    # load.py imports these names at its own import time: registration must mutate them.
    for name in ("_PACKAGED_DATASETS_MODULES", "_EXTENSION_TO_MODULE", "_MODULE_TO_EXTENSIONS",
                 "_MODULE_TO_METADATA_EXTENSIONS", "_MODULE_TO_METADATA_FILE_NAMES", "_ALL_ALLOWED_EXTENSIONS"):
        assert getattr(datasets.load, name) is getattr(packaged, name), name


def test_bin_extension_maps_to_the_builder_and_idx_is_left_to_lance():
    assert packaged._EXTENSION_TO_MODULE[".bin"] == (BUILDER_NAME, {})
    assert ".bin" in packaged._ALL_EXTENSIONS and ".bin" in packaged._ALL_ALLOWED_EXTENSIONS
    assert packaged._MODULE_TO_EXTENSIONS[BUILDER_NAME] == [".bin", ".zip"]
    assert packaged._MODULE_TO_METADATA_EXTENSIONS[BUILDER_NAME] == []
    assert packaged._MODULE_TO_METADATA_FILE_NAMES[BUILDER_NAME] == []
    assert packaged._EXTENSION_TO_MODULE.get(".idx", (None,))[0] != BUILDER_NAME


def test_registration_is_idempotent():
    before = (list(packaged._ALL_EXTENSIONS), list(packaged._ALL_ALLOWED_EXTENSIONS))
    mmidx_builder.registry.register()
    assert (list(packaged._ALL_EXTENSIONS), list(packaged._ALL_ALLOWED_EXTENSIONS)) == before


def test_folder_module_inference_picks_the_builder(tmp_path):
    with IndexedFileWriter(tmp_path / "train", dtype=np.uint16) as writer:
        writer.add_document(list(range(50)))
    module = datasets.load.dataset_module_factory(str(tmp_path))
    assert module.module_path == "mmidx_builder.mmidx"
    (config,) = module.builder_configs_parameters.builder_configs
    assert [str(f).rsplit("/", 1)[-1] for f in config.data_files["train"]] == ["train.bin"]


def test_named_module_factory(tmp_path):
    (tmp_path / "x.bin").write_bytes(b"")
    module = datasets.load.dataset_module_factory(BUILDER_NAME, data_files={"train": str(tmp_path / "x.bin")})
    assert module.module_path == "mmidx_builder.mmidx"


def test_without_import_the_builder_is_unknown(tmp_path):
    """The registration is what makes it work: a fresh interpreter without the import fails."""
    code = "import datasets; datasets.load_dataset('mmidx', data_files='x.bin')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0
