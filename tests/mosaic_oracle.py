"""MosaicML's own shard writers and readers, as the oracle of the MDS and legacy-streaming tests.

Fixtures are written by the real writers and read back by the real readers (installed by
``scripts/install_mosaic_oracle.sh``; shared/MOSAIC.md describes both formats byte by byte):

- MDS, ``mosaicml-streaming==0.13.0``: :func:`write_mds` (``streaming.MDSWriter``),
  :func:`read_mds_local` (``streaming.LocalDataset``: uncompressed shards only),
  :func:`read_mds_streaming` (``streaming.StreamingDataset``, iterated in this process, on a
  copy since it decompresses into the folder it reads), and :func:`write_llm_foundry_concat`,
  token shards as LLM Foundry's ``convert_dataset_hf.py --concat_tokens N`` writes them.
- Composer's legacy format, ``mosaicml==0.9.0``: :func:`write_legacy`
  (``StreamingDatasetWriter``), :func:`read_legacy_index` (``StreamingDatasetIndex.load``),
  :func:`read_legacy_samples` (its ``StreamingDataset.__getitem__``). The wheel's
  ``composer/__init__.py`` imports the whole trainer (torchmetrics, yahp, ...), which is not
  installed: :func:`composer_streaming_or_skip` imports the wheel's own, unmodified
  ``composer/datasets/streaming/*.py`` under stand-in parent packages (see there).

Every helper skips a test where its oracle is missing, and fails it under
MMIDX_REQUIRE_ORACLE=1 (CI), as conftest's ``require_or_skip`` does. No tests here: the
oracle's own checks are tests/test_mosaic_oracle.py.
"""

from __future__ import annotations

import contextlib
import gzip
import importlib
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

STREAMING_VERSION = "0.13.0"
COMPOSER_VERSION = "0.9.0"
INSTALL = "bash scripts/install_mosaic_oracle.sh .venv"

_streaming: Any = None
_legacy: Any = None


def _require_or_skip(why: str):
    from conftest import require_or_skip

    require_or_skip(f"{why} (install it: {INSTALL})")


@contextlib.contextmanager
def environment(**names):
    """These environment variables set (as strings) inside the block, restored after it."""
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: str(value) for name, value in names.items()})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _one_process_world():
    """Both readers take their world (rank, world size, local ones) from environment
    variables; a test process may have set some. They read as one process of one node here."""
    return environment(RANK=0, WORLD_SIZE=1, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, NODE_RANK=0)


# --- imports ---------------------------------------------------------------------------

def _torchvision_stand_in() -> dict[str, types.ModuleType]:
    """What ``import streaming`` asks of torchvision: ``streaming/vision/base.py`` subclasses
    ``torchvision.datasets.VisionDataset`` and imports ``transforms.functional.to_tensor``
    (only its image datasets call it). No torchvision wheel fits torch 2.13 CPU (the
    registry's is a CUDA build), and a stand-in installed in site-packages would be seen by
    everything else in the venv: ``transformers`` decides at import time, by
    ``importlib.util.find_spec("torchvision")``, that torchvision is there. So these modules
    stand in sys.modules only while ``streaming`` is imported."""
    import torch.utils.data

    package = types.ModuleType("torchvision")
    package.__path__ = []
    package.__version__ = "0+mmidx-stand-in"
    datasets = types.ModuleType("torchvision.datasets")

    class VisionDataset(torch.utils.data.Dataset):
        """torchvision's base of datasets; MDS readers never use it."""

    datasets.VisionDataset = VisionDataset
    transforms = types.ModuleType("torchvision.transforms")
    transforms.__path__ = []
    functional = types.ModuleType("torchvision.transforms.functional")

    def to_tensor(pic):
        raise NotImplementedError("torchvision is a stand-in here (tests/mosaic_oracle.py): no image transforms")

    functional.to_tensor = to_tensor
    package.datasets, package.transforms, transforms.functional = datasets, transforms, functional
    return {module.__name__: module for module in (package, datasets, transforms, functional)}


def _import_streaming():
    global _streaming
    if _streaming is None:
        if importlib.util.find_spec("streaming") is None:
            raise ImportError(f"mosaicml-streaming {STREAMING_VERSION} is not installed")
        import transformers  # noqa: F401  (imported before the stand-in is seen, see above)

        stand_in = {} if importlib.util.find_spec("torchvision") else _torchvision_stand_in()
        sys.modules.update(stand_in)
        try:
            import streaming
            import streaming.base.util  # noqa: F401
        finally:
            for name in stand_in:
                sys.modules.pop(name, None)
        if streaming.__version__ != STREAMING_VERSION:
            raise ImportError(f"mosaicml-streaming is {streaming.__version__}, the oracle is {STREAMING_VERSION}")
        _streaming = streaming
    return _streaming


def streaming_or_skip():
    """The ``streaming`` package (mosaicml-streaming 0.13.0); skips the test where it does not
    import, fails it under MMIDX_REQUIRE_ORACLE=1."""
    try:
        return _import_streaming()
    except Exception as error:  # a broken install is as missing as an absent one
        _require_or_skip(f"mosaicml-streaming {STREAMING_VERSION} does not import ({type(error).__name__}: {error})")


def _import_legacy():
    """The wheel's ``composer/datasets/streaming/{format,world,download,writer,dataset}.py``,
    run as they are, under stand-ins for the packages above them.

    ``import composer.datasets.streaming`` would run ``composer/__init__.py`` (the trainer,
    torchmetrics, yahp) and ``composer/datasets/__init__.py`` (every dataset, torchvision):
    none of it is installed. So ``composer``, ``composer.datasets``,
    ``composer.datasets.streaming``, ``composer.utils`` and ``composer.utils.object_store`` are
    empty packages whose ``__path__`` is the wheel's folder, which makes every module below
    them the wheel's own file: ``composer/utils/dist.py`` (the world, from torch.distributed
    and RANK/WORLD_SIZE...), ``utils/import_helpers.py`` and ``utils/object_store/
    {object_store,s3_object_store,sftp_object_store}.py`` (boto3 and paramiko are imported
    only on use). The one name stood in for is ``composer.utils.get_file``, the http download
    of ``download.py``, which ``utils/file_helpers.py`` defines with the trainer's time
    classes. The stand-ins and the loaded modules leave sys.modules afterwards: the modules
    keep what they imported, and a real ``import composer`` elsewhere is not shadowed."""
    global _legacy
    if _legacy is None:
        spec = importlib.util.find_spec("composer")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"mosaicml {COMPOSER_VERSION} (composer) is not installed")
        from importlib.metadata import version

        if version("mosaicml") != COMPOSER_VERSION:
            raise ImportError(f"mosaicml is {version('mosaicml')}, the oracle is {COMPOSER_VERSION}")
        root = list(spec.submodule_search_locations)[0]

        def get_file(*args, **kwargs):
            raise NotImplementedError("composer.utils.get_file (http downloads) is not part of the oracle")

        stand_ins = {}
        for name, folder in [("composer", ""), ("composer.utils", "utils"),
                             ("composer.utils.object_store", "utils/object_store"),
                             ("composer.datasets", "datasets"), ("composer.datasets.streaming", "datasets/streaming")]:
            module = types.ModuleType(name)
            module.__path__ = [os.path.join(root, folder)]
            module.__file__ = None
            stand_ins[name] = module
        stand_ins["composer.utils"].get_file = get_file

        def ours(name):
            return name == "composer" or name.startswith("composer.")

        before = {name: module for name, module in sys.modules.items() if ours(name)}
        for name in before:
            del sys.modules[name]
        sys.modules.update(stand_ins)
        try:
            names = ["format", "world", "download", "writer", "dataset"]
            modules = {name: importlib.import_module(f"composer.datasets.streaming.{name}") for name in names}
        finally:
            for name in [name for name in sys.modules if ours(name)]:
                del sys.modules[name]
            sys.modules.update(before)
        _legacy = types.SimpleNamespace(**modules, root=root)
    return _legacy


def composer_streaming_or_skip():
    """Composer 0.9.0's legacy streaming modules, as a namespace with ``format``, ``world``,
    ``download``, ``writer`` and ``dataset`` (``.writer.StreamingDatasetWriter``,
    ``.format.StreamingDatasetIndex``, ``.dataset.StreamingDataset``, ...); skips the test
    where they do not import, fails it under MMIDX_REQUIRE_ORACLE=1."""
    try:
        return _import_legacy()
    except Exception as error:
        _require_or_skip(f"mosaicml {COMPOSER_VERSION}'s composer/datasets/streaming does not import "
                         f"({type(error).__name__}: {error})")


# --- MDS (mosaicml-streaming) ----------------------------------------------------------

def write_mds(folder, columns: Mapping[str, str], samples: Iterable[Mapping[str, Any]], *,
              compression: str | None = None, hashes: Sequence[str] | None = None,
              size_limit: int | str | None = 1 << 26, **writer_kwargs) -> dict:
    """Writes ``samples`` with ``streaming.MDSWriter(out=folder, columns=columns, ...)`` and
    returns its ``index.json``, parsed. ``folder`` must not exist or be empty (MDSWriter
    refuses a folder with files in it)."""
    import json

    streaming = streaming_or_skip()
    with streaming.MDSWriter(out=str(folder), columns=dict(columns), compression=compression,
                             hashes=list(hashes) if hashes else None, size_limit=size_limit,
                             **writer_kwargs) as writer:
        for sample in samples:
            writer.write(sample)
    with open(os.path.join(str(folder), "index.json")) as file:
        return json.load(file)


def read_mds_local(folder, split: str | None = None) -> list[dict[str, Any]]:
    """Every sample, in sample-id order, as ``streaming.LocalDataset(folder, split)`` decodes
    it. LocalDataset cannot decompress: shards written with compression fail here (use
    :func:`read_mds_streaming`)."""
    streaming = streaming_or_skip()
    dataset = streaming.LocalDataset(str(folder), split)
    return [dataset[index] for index in range(len(dataset))]


def read_mds_streaming(folder, tmp, split: str | None = None, **dataset_kwargs) -> list[dict[str, Any]]:
    """Every sample as ``streaming.StreamingDataset(local=copy, split=split, shuffle=False,
    batch_size=1)`` yields it, iterated in this process (one rank, one worker: sample-id
    order). ``copy`` is a fresh copy of ``folder`` under ``tmp``, since StreamingDataset
    decompresses zipped shards into the folder it reads (it leaves both files there).
    ``dataset_kwargs`` go to StreamingDataset (``allow_unsafe_types=True`` for ``pkl``).

    Each StreamingDataset takes the first free shared-memory prefix (``/dev/shm/NNNNNN_*``),
    skipping those in use and those with a filelock left in the temporary folder, so calls in
    one process need no ``clean_stale_shared_memory()`` (which would also unlink the prefixes
    of other processes running now). Its shared memory and the two filelocks are released
    here afterwards; otherwise both stay until the process exits (atexit), the filelocks for
    good."""
    streaming = streaming_or_skip()
    copy = tempfile.mkdtemp(prefix="mds-streaming-", dir=str(tmp))
    shutil.rmtree(copy)
    shutil.copytree(str(folder), copy)
    with _one_process_world():
        dataset = streaming.StreamingDataset(local=copy, split=split, shuffle=False, batch_size=1, **dataset_kwargs)
        try:
            return list(dataset)
        finally:
            _release(dataset)


def _release(dataset) -> None:
    """Frees what a StreamingDataset holds beyond its own lifetime: its thread pool, its
    shared memory (each block registered with atexit) and its filelock files."""
    import atexit

    from streaming.base.constant import BARRIER_FILELOCK, CACHE_FILELOCK
    from streaming.base.shared.prefix import _get_path

    executor = getattr(dataset, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=True)
    iterator = getattr(dataset, "_iterator", None)
    if iterator is not None:
        iterator.exit()
    blocks = [getattr(dataset, "_locals_shm", None), getattr(dataset, "_resume_shm", None),
              dataset._shared_barrier._arr.shm, dataset._next_epoch.arr.shm, dataset._cache_usage.arr.shm,
              dataset._shard_states.shm, dataset._shard_access_times.shm]
    for block in blocks:
        if block is not None:
            atexit.unregister(block.cleanup)
            with contextlib.suppress(BufferError):  # a numpy view still open: atexit's job after all
                block.cleanup()
                continue
            atexit.register(block.cleanup)
    for lock in (BARRIER_FILELOCK, CACHE_FILELOCK):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(dataset._filelock_root, _get_path(dataset._shm_prefix_int, lock)))


# --- LLM Foundry's token shards ----------------------------------------------------------

def llm_foundry_concat(documents: Iterable[Sequence[int]], concat_tokens: int, *, bos: Sequence[int] = (),
                       eos: Sequence[int] = (), no_wrap: bool = False) -> list[list[int]]:
    """The samples LLM Foundry's ``ConcatTokensDataset.__iter__`` (llmfoundry/data/data.py;
    the same loop since scripts/data_prep/convert_dataset_hf.py of May 2023) makes of
    tokenized documents. Each document's ``input_ids`` (as its tokenizer returned them, with
    any special tokens the tokenizer adds itself) go into one buffer between the bos and eos
    text's ids; every full ``concat_tokens`` ids make a sample; the rest waits for the next
    document, or with ``--no_wrap`` is dropped. What is left at the end is dropped too."""
    samples, buffer = [], []
    for ids in documents:
        buffer = buffer + list(bos) + [int(i) for i in ids] + list(eos)
        while len(buffer) >= concat_tokens:
            samples.append(buffer[:concat_tokens])
            buffer = buffer[concat_tokens:] if not no_wrap else []
    return samples


def write_llm_foundry_concat(out_root, documents, concat_tokens: int, *, bos: Sequence[int] = (),
                             eos: Sequence[int] = (), no_wrap: bool = False, compression: str | None = "zstd",
                             tokens: str = "ndarray:int32",
                             size_limit: int | str | None = 1 << 26) -> dict[str, list[np.ndarray]]:
    """Writes token shards as ``convert_dataset_hf.py --concat_tokens N`` does
    (llmfoundry/command_utils/data_prep/convert_dataset_hf.py, ``convert_dataset_hf``): one
    MDS folder per split, ``out_root/<split>``, written by ``MDSWriter(columns=..., out=...,
    compression=...)`` with the default size limit. ``documents`` is a list of token-id lists
    (the split ``train``) or ``{split: documents}``. ``compression`` defaults to ``zstd``, as
    its README's commands say (the script's own default is None).

    ``tokens`` picks the generation: ``"ndarray:int32"`` (LLM Foundry since June 2024, PR
    #1254: ``{'tokens': 'ndarray:int32'}``, ``np.asarray(sample, dtype=np.int32)``) or
    ``"bytes"`` (before it: ``{'tokens': 'bytes'}``, ``np.asarray(sample).tobytes()``, the
    int64 of numpy's default integer on Linux). Returns ``{split: [sample ids as the int32 or
    int64 array written]}``."""
    streaming = streaming_or_skip()
    if not isinstance(documents, Mapping):
        documents = {"train": documents}
    if tokens not in ("ndarray:int32", "bytes"):
        raise ValueError(f"tokens must be 'ndarray:int32' or 'bytes', got {tokens!r}")
    written = {}
    for split, split_documents in documents.items():
        samples = [np.asarray(sample, dtype=np.int32 if tokens == "ndarray:int32" else np.int64)
                   for sample in llm_foundry_concat(split_documents, concat_tokens, bos=bos, eos=eos, no_wrap=no_wrap)]
        with streaming.MDSWriter(columns={"tokens": tokens}, out=os.path.join(str(out_root), split),
                                 compression=compression, size_limit=size_limit) as out:
            for sample in samples:
                out.write({"tokens": sample if tokens == "ndarray:int32" else sample.tobytes()})
        written[split] = samples
    return written


# --- Composer's legacy format --------------------------------------------------------------

def write_legacy(folder, fields: Sequence[str], samples: Iterable[Mapping[str, bytes]], *,
                 shard_size_limit: int = 1 << 24, compression: str | None = None) -> list[str]:
    """Writes ``samples`` (dicts of bytes; keys beyond ``fields`` are ignored) with Composer
    0.9.0's ``StreamingDatasetWriter(dirname=folder, fields=fields, shard_size_limit=...,
    compression=None | 'gz' | 'gz:N')`` (no progress bar) and returns the names of the files
    it wrote, sorted. Its files are opened with mode ``x``: the folder must not hold them."""
    legacy = composer_streaming_or_skip()
    with legacy.writer.StreamingDatasetWriter(dirname=str(folder), fields=list(fields),
                                              shard_size_limit=shard_size_limit, compression=compression) as writer:
        writer.write_samples(samples, use_tqdm=False)
    return sorted(os.listdir(str(folder)))


def _legacy_compression(folder) -> str | None:
    """The scheme named in ``compression.txt`` (the writer writes it for a compressed dataset)."""
    path = os.path.join(str(folder), "compression.txt")
    if not os.path.exists(path):
        return None
    with open(path) as file:
        return file.read().rstrip() or None


def read_legacy_index(folder):
    """``StreamingDatasetIndex.load`` of the folder's ``index.mds`` (read through ``gzip`` for
    ``index.mds.gz``): the real index object, with ``fields``, ``samples_per_shard``,
    ``bytes_per_shard``, ``bytes_per_sample``, ``sample_shards``, ``sample_shard_offsets``,
    ``total_samples``. Exposed as its loader returns it: sizes stored as int8 (every sample
    under 256 bytes, not all alike) come back negative for samples of 128-255 bytes, and the
    offsets after one are wrong (shared/MOSAIC.md)."""
    legacy = composer_streaming_or_skip()
    scheme = _legacy_compression(folder)
    basename = legacy.format.get_index_basename(scheme)
    opener = gzip.open if scheme == "gz" else open
    with opener(os.path.join(str(folder), basename), "rb") as file:
        return legacy.format.StreamingDatasetIndex.load(file)


def _raw(value: bytes) -> bytes:
    return value


def read_legacy_samples(folder, local=None) -> list[dict[str, bytes]]:
    """Every sample, in sample-id order, as Composer 0.9.0's own ``StreamingDataset`` reads
    it: ``StreamingDataset(remote=folder, local=local, shuffle=False, decoders=<bytes as they
    are, for every field>)``, its ``download()`` (which copies the folder into ``local`` and
    un-gzips it, as from any remote) and then ``dataset[i]`` (``__getitem__``: shard, offset
    and size from the index, ``bytes_to_sample_dict``). ``local`` is a fresh temporary folder
    by default. Nothing is fixed: on a dataset with the int8 trap (see
    :func:`read_legacy_index`) the first sample's read runs to the end of its shard and the
    second raises OSError (a seek to a negative offset)."""
    legacy = composer_streaming_or_skip()
    fields = read_legacy_index(folder).fields
    with contextlib.ExitStack() as stack:
        if local is None:
            local = stack.enter_context(tempfile.TemporaryDirectory(prefix="legacy-streaming-"))
        with _one_process_world():
            dataset = legacy.dataset.StreamingDataset(remote=str(folder), local=str(local), shuffle=False,
                                                      decoders={field: _raw for field in fields})
            dataset.download()
            if getattr(dataset, "_download_exception", None) is not None:  # kept, for its iterator to raise
                raise dataset._download_exception
            return [dataset[index] for index in range(dataset.index.total_samples)]
