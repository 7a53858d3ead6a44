#!/usr/bin/env bash
# Installs the oracle of the MosaicML shard tests into the given virtual environment (default
# .venv): the real writers and readers of both formats (shared/MOSAIC.md), which
# tests/mosaic_oracle.py drives.
#   - mosaicml-streaming 0.13.0 (MDS: MDSWriter, LocalDataset, StreamingDataset), without its
#     dependencies: they would pull a CUDA torch, and boto3, google-cloud-storage, oci, azure,
#     paramiko and matplotlib, which only its remote storage and simulator use. What
#     `import streaming` and MDS need is installed by name: Brotli, python-snappy and zstd
#     (the PyPI package `zstd`, imported so by streaming/base/compression.py), xxhash
#     (hashes), catalogue (its registries), Pillow (its image encodings, imported by
#     encodings.py), tqdm, filelock and transformers (streaming/base/dataloader.py). Its
#     numpy < 2.2, transformers < 5 and xxhash < 4 pins are not taken: the venv's newer ones
#     run MDS (tests/test_mosaic_oracle.py checks it).
#   - torchvision is not installed: the registry's wheels for torch 2.13 are CUDA builds.
#     `import streaming` needs two names of it (streaming/vision/base.py), which
#     tests/mosaic_oracle.py stands in for while it imports streaming. The stand-in is not
#     put in site-packages, since transformers takes any importable torchvision for a real
#     one, and the rest of the suite runs in this venv.
#   - mosaicml 0.9.0, Composer's wheel, for its legacy composer/datasets/streaming
#     (StreamingDatasetWriter, StreamingDatasetIndex, StreamingDataset), without its
#     dependencies (torch, torchmetrics, torchvision, yahp...): `import composer` cannot run
#     here, so tests/mosaic_oracle.py imports the wheel's streaming files under stand-in
#     parent packages.
# Without torch there is nothing to do (both readers are torch datasets).
set -euo pipefail
venv=$(realpath "${1:-.venv}")
cd "$(dirname "$0")/.."
py="$venv/bin/python"

if ! "$py" -c "import torch" 2>/dev/null; then
    echo "note: torch is not installed; the MosaicML oracle is skipped (its tests skip)" >&2
    exit 0
fi
probe='
import importlib.metadata as m, importlib.util as u, sys
ok = m.version("mosaicml-streaming") == "0.13.0" and m.version("mosaicml") == "0.9.0"
sys.exit(not ok or any(u.find_spec(n) is None for n in ["brotli", "snappy", "zstd", "xxhash", "catalogue", "PIL", "tqdm", "filelock", "transformers"]))'
if ! "$py" -c "$probe" 2>/dev/null; then
    source scripts/uv.sh
    "${uv_pip[@]}" -p "$py" --no-deps mosaicml-streaming==0.13.0 mosaicml==0.9.0
    "${uv_pip[@]}" -p "$py" "Brotli>=1.0.9" "python-snappy>=0.6.1,<1" "zstd>=1.5.2.5,<2" "catalogue>=2,<3" \
        xxhash Pillow tqdm filelock transformers
fi
PYTHONPATH=tests "$py" - <<'PY'
import tempfile, numpy as np, mosaic_oracle as oracle
oracle._import_streaming(), oracle._import_legacy()  # raise here, rather than skip
with tempfile.TemporaryDirectory() as tmp:
    samples = [{"tokens": np.arange(n, dtype=np.int32)} for n in (1, 3)]
    oracle.write_mds(f"{tmp}/mds", {"tokens": "ndarray:int32"}, samples, compression="zstd")
    got = oracle.read_mds_streaming(f"{tmp}/mds", tmp)
    assert [s["tokens"].tolist() for s in got] == [[0], [0, 1, 2]], got
    oracle.write_legacy(f"{tmp}/legacy", ["x"], [{"x": b"ab"}, {"x": b"c"}])
    assert oracle.read_legacy_samples(f"{tmp}/legacy") == [{"x": b"ab"}, {"x": b"c"}]
PY
