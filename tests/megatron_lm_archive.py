"""The pinned Megatron-LM archives (../shared/oracles/megatron-lm/) as oracles: where they are,
the venv whose megatron-core pairs with each, and Megatron-LM's own reading of a command line.

    oracle(version, cache)                 -> (python, extracted folder); skips, or fails under
                                              MMIDX_REQUIRE_ORACLE=1 (CI), when one is missing
    megatron_lm_reading(version, argvs, cache) -> what Megatron-LM makes of each argv
                                              (``READ`` below), and every option its parser has

Used by tests/test_megatron_lm_oracle.py (the whole data path, rank by rank) and the tests of
``megatron.resolve`` (test_megatron_resolve.py, test_training_collator.py). Megatron-LM runs in
a subprocess with the extracted archive first on PYTHONPATH; nothing here imports mmidx_builder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import require_or_skip

ROOT = Path(__file__).resolve().parent.parent
ARCHIVES = Path(os.environ.get("MMIDX_MEGATRON_LM_ARCHIVES") or ROOT.parent / "shared" / "oracles" / "megatron-lm")
ORACLES = {  # megatron_version -> (archive, the python of the venv with its megatron-core, whose version)
    "core_v0.16": ("megatron-lm-core_v0.16.1.tar.gz",
                   os.environ.get("MMIDX_MEGATRON016_PYTHON") or str(ROOT / ".venv-megatron016" / "bin" / "python"),
                   "0.16.1"),
    "core_v0.19": ("megatron-lm-core_v0.19.0.tar.gz", sys.executable, "0.19.2"),
}
# Without importing megatron.core (seconds): the installed version, and what the training code imports.
PROBE = """import sys, importlib.metadata as m, importlib.util as u
sys.exit(m.version("megatron-core") != sys.argv[1] or not all(u.find_spec(n) for n in ("pydantic", "torch", "triton")))
"""

# Run by megatron_lm_reading: for each argv, what pretrain_gpt.py does with it before building
# datasets (parse_args, validate_args with pretrain_gpt's defaults, core_gpt_dataset_config_from_args),
# and the GPTDatasetConfig fields that decide a batch; and the option strings of its parser.
READ = r"""
import argparse, json, sys, typing, warnings
warnings.simplefilter("ignore")
if not hasattr(typing, "override"):  # core_v0.19.0's training code uses Python 3.12's typing.override
    import typing_extensions
    typing.override = typing_extensions.override
request_path, answer_path = sys.argv[1:3]
request = json.load(open(request_path))
from megatron.training import arguments
parsers = []
make = argparse.ArgumentParser.parse_args
def keep(self, *a, **k):
    parsers.append(self)
    return make(self, *a, **k)
argparse.ArgumentParser.parse_args = keep
out = {"configs": []}
sys.argv = ["pretrain_gpt.py", "--seq-length", "8"]
arguments.parse_args()
out["options"] = sorted({o for a in parsers[0]._actions for o in a.option_strings if o.startswith("--")})
KINDS = {"_StoreAction": "store", "_StoreTrueAction": "true", "_StoreFalseAction": "false",
         "BooleanOptionalAction": "bool", "_StoreConstAction": "const"}
spec = []
for a in parsers[0]._actions:
    if type(a).__name__ == "_HelpAction":
        continue
    kind = KINDS[type(a).__name__]  # a KeyError: an action kind SPEC_LINE does not describe yet
    if kind == "bool":
        names = [o for o in a.option_strings if not o.startswith("--no-")]
    else:
        names = list(a.option_strings)
    typed = {None: "str", int: "int", float: "float", str: "str"}.get(a.type, "any") if kind == "store" else "-"
    choices = "-" if a.choices is None or typed == "any" else "|".join(str(c) for c in a.choices)
    nargs = "-" if a.nargs is None or kind != "store" else str(a.nargs)
    spec.append(" ".join([",".join(names), kind, nargs, typed, choices]))
out["spec"] = sorted(spec)
if request["argvs"]:
    import pretrain_gpt
for argv in request["argvs"]:
    sys.argv = ["pretrain_gpt.py", *argv]
    args = arguments.parse_args()
    arguments.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
    config = pretrain_gpt.core_gpt_dataset_config_from_args(args)
    fields = {k: getattr(config, k) for k in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss",
              "create_attention_mask", "inter_document_masking", "add_extra_token_to_sequence", "random_seed",
              "sequence_length")}
    fields.update(eod=int(config.tokenizer.eod), pad=int(getattr(config.tokenizer, "pad", -1)))
    out["configs"].append(fields)
# Accept or refuse: parse_args, validate_args and the micro-batch calculator that
# set_global_variables builds (where a global batch size that does not divide is refused),
# under each case's WORLD_SIZE; argparse's message is what it prints before exiting.
import contextlib, io, os
out["checks"] = []
# parse_args builds its ~800-option parser anew each call (most of a check's time): the first
# one built is handed back to the later calls, which then parse exactly as a fresh one would.
built = []
build = arguments.add_megatron_arguments
def built_once(parser):
    if not built:
        built.append(build(parser))
    return built[0]
arguments.add_megatron_arguments = built_once
for argv, world_size in request.get("checks", []):
    os.environ["WORLD_SIZE"] = str(world_size)
    sys.argv = ["pretrain_gpt.py", *argv]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            args = arguments.parse_args()
            arguments.validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
            from megatron.core.num_microbatches_calculator import (destroy_num_microbatches_calculator,
                                                                   init_num_microbatches_calculator)
            init_num_microbatches_calculator(0, getattr(args, "rampup_batch_size", None), args.global_batch_size,
                                             args.micro_batch_size,
                                             args.data_parallel_size * getattr(args, "gtp_weight_remat_size", 1),
                                             getattr(args, "decrease_batch_size_if_needed", False))
            destroy_num_microbatches_calculator()
        out["checks"].append({"ok": True, "error": ""})
    except BaseException as error:  # SystemExit from argparse, AssertionError from validate_args
        out["checks"].append({"ok": False, "error": f"{type(error).__name__}: {error} {printed.getvalue()[-400:]}"})
json.dump(out, open(answer_path, "w"))
"""


def oracle(version: str, cache: Path):
    """(python, extracted Megatron-LM folder) for ``version``; skips, or fails under
    MMIDX_REQUIRE_ORACLE=1, when the archive or the venv of its megatron-core is missing."""
    archive_name, python, core_version = ORACLES[version]
    archive = ARCHIVES / archive_name
    if not archive.is_file():  # checked under MMIDX_REQUIRE_ORACLE=1 as well: a missing archive fails there
        require_or_skip(f"no Megatron-LM archive {archive} (CI has ../shared/oracles/megatron-lm; "
                        "MMIDX_MEGATRON_LM_ARCHIVES names another folder)")
    if not (os.path.isfile(python)
            and subprocess.run([python, "-c", PROBE, core_version], capture_output=True).returncode == 0):
        require_or_skip(f"no megatron-core {core_version} under {python} for Megatron-LM {version} "
                        "(bash scripts/install_megatron016_oracle.sh .venv-megatron016, scripts/install_oracle.sh .venv)")
    folder = cache / version
    if not (folder / "pretrain_gpt.py").exists():
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
    return python, folder


def megatron_lm_reading(version: str, argvs: list[list[str]], cache: Path, checks=()) -> dict:
    """``{"options": [every --option of Megatron-LM's parser], "spec": [its options as
    mmidx_builder/megatron/lm_options.py lists them], "configs": [per argv, the GPTDatasetConfig
    fields of READ and the tokenizer's eod and pad], "checks": [per (argv, WORLD_SIZE) of
    ``checks``, {"ok": accepted, "error": why not}]}``: one Megatron-LM process for all."""
    python, folder = oracle(version, cache)
    request, answer = cache / f"read-{version}.json", cache / f"answer-{version}.json"
    request.write_text(json.dumps({"argvs": argvs, "checks": [list(check) for check in checks]}))
    result = subprocess.run([python, "-c", READ, str(request), str(answer)], cwd=cache, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(folder), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, f"Megatron-LM {version} could not read the command lines: {result.stderr[-3000:]}"
    return json.loads(answer.read_text())


# --- mmidx_builder/megatron/lm_options.py, written from the oracle -------------------------------

OPTIONS_MODULE = ROOT / "mmidx_builder" / "megatron" / "lm_options.py"
OPTIONS_HEADER = '''"""The options of Megatron-LM's pretrain_gpt.py parser (``megatron/training/arguments.py``
``parse_args``) at each release followed, one line per option: its option strings, the action
(store, true: store_true, false: store_false, bool: BooleanOptionalAction, const), nargs (``-``:
one value), the type (int, float, str; any: a function of Megatron-LM's own, not checked here)
and the choices (``|``-separated; ``-``: any). Names, types and choices only: what a command line
must satisfy to be read by Megatron-LM.

Written by ``python tests/megatron_lm_archive.py`` from Megatron-LM's own parser (the pinned
archives); tests/test_megatron_lm_parser.py checks that it still equals it. Do not edit by hand.
"""

OPTIONS = {
'''


def write_options_module(cache: Path) -> None:
    """Writes OPTIONS_MODULE from Megatron-LM's parser at each tag."""
    body = OPTIONS_HEADER
    for version in ORACLES:
        lines = megatron_lm_reading(version, [], cache)["spec"]
        body += f'    "{version}": """\\\n' + "\n".join(lines) + '\n""",\n'
    OPTIONS_MODULE.write_text(body + "}\n")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        write_options_module(Path(folder))
