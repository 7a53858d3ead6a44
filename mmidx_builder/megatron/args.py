"""Megatron's arguments, resolved in one place: :func:`resolve` reads a Megatron-LM command
line and keywords as the samples' settings, the per-split plans and ``MegatronCollator``'s
flags. The builder (hf/mmidx_megatron.py), ``mmidx samples --megatron-args`` and
``MegatronCollator.from_megatron_args`` all go through it; a keyword given beside the command
line overrides what the command line says (an explicit blend replaces its whole blend).

Which arguments touch the data, and how (Megatron-LM ``megatron/training/arguments.py``,
``training.py:get_train_valid_test_num_samples``, ``utils/common_utils.py:
get_blend_and_blend_per_split``, ``pretrain_gpt.py:core_gpt_dataset_config_from_args``):

    --data-path, --data-args-path (a file of the same tokens)      data_path
    --split (default "969, 30, 1" with --data-path)                split_ratios
    --train/valid/test-data-path, --per-split-data-args-path (JSON) train/valid/test_data_path
    --seq-length, --seed (default 1234), --mid-level-dataset-surplus   ONE_TO_ONE below
    --train-samples, or --train-iters x --global-batch-size        num_samples["train"]
    --eval-iters (100), --eval-interval (required), --full-validation,  num_samples["validation"],
    --skip-train, --eval-global-batch-size                         num_samples["test"]
    --reset-position-ids, --reset-attention-mask, --eod-mask-loss,  collator_flags (ONE_TO_ONE);
    --no-create-attention-mask-in-dataloader,                      they change batches, not
    --dataloader-inter-document-masking                            samples
    --tokenizer-type NullTokenizer --vocab-size V                  collator_flags eod_id, pad_id

Where Megatron-LM versions differ (``--rampup-batch-size``, NullTokenizer's EOD, which options
exist), ``megatron_version`` picks one (versions.py). Arguments that make Megatron-LM build
another dataset (UNSUPPORTED) are refused, naming the flag; a command line Megatron-LM's own
parser would refuse (an option it does not have, an abbreviation, a value of the wrong type or
not among the choices: lm_parser.py) is refused with its reason, and so are the batch sizes its
``validate_args`` refuses (batch_sizes.py); every other argument is ignored: the ones known not
to change the samples (IGNORED) silently, the others named in a warning. Without
``--global-batch-size``, Megatron-LM's default is derived where the launcher gives the world
size (``WORLD_SIZE``, as Megatron-LM reads it), else refused naming what gives it. A command
line is parsed with argparse because it is one (the library's own API takes plain keyword
arguments).

A new Megatron argument is one edit here: a row of ONE_TO_ONE when it sets one keyword, else
its parser line and where it goes in :func:`_command_line_settings` or
:func:`_command_line_flags`.

The argument files are read as small regular files (a FIFO or a device in their place is
refused, not read without end), and an error about what one holds never quotes it: the
file may be any file on the machine. :func:`inline_argument_files` puts their tokens into
the command line itself, so that a dataset card's command line names every path it reaches
(hf/card_scope.py checks them).
"""

from __future__ import annotations

import argparse
import functools
import json
import shlex

from ..warnings_once import warn_once
from ..storage.files import read_small_file
from ..errors import FormatError, ParameterError
from .sampling import DEFAULT_SEED, DEFAULT_SEQ_LENGTH, check_settings
from .plan import DEFAULT_SURPLUS, SplitPlan, megatron_plan, parse_data_path
from .batch_sizes import PARALLEL_SIZES, check_batch_sizes, derived_global_batch_size
from .lm_parser import check_parses
from .splits import check_seq_length
from .versions import check_arguments_exist, check_version, null_tokenizer_ids, rampup_train_iters

# --- what resolve() takes and gives ----------------------------------------------------------

# The keywords that give a blend (Megatron's blend and blend_per_split); a prefix in any of
# them names files.
BLEND_SETTINGS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")
# The samples' settings (load_dataset's keywords) and their values when neither the command
# line nor a keyword gives one. split_ratios None: megatron_plan applies Megatron's legacy
# default with data_path. --mid-level-dataset-surplus defaults to 0.005 (arguments.py:3172 at
# core_v0.19.0); --seed to 1234 (sampling.DEFAULT_SEED).
SETTINGS = {**dict.fromkeys(BLEND_SETTINGS), "split_ratios": None, "num_samples": None,
            "mid_level_dataset_surplus": DEFAULT_SURPLUS, "seq_length": DEFAULT_SEQ_LENGTH, "seed": DEFAULT_SEED}
# The settings every split shares; the others make the per-split plans (megatron_plan's keywords).
SAMPLING_SETTINGS = ("seq_length", "seed")
# MegatronCollator's keywords and Megatron-LM's defaults for them. The flags are argparse
# store_true / store_false options of Megatron-LM's megatron/training/arguments.py (core_v0.19.0
# lines 3154-3167, core_v0.16.1 2498-2507) that pretrain_gpt.py's core_gpt_dataset_config_from_args
# hands to GPTDatasetConfig; --no-create-attention-mask-in-dataloader is store_false into
# create_attention_mask_in_dataloader, so the mask is made unless it is given.
# --dataloader-inter-document-masking exists since core_v0.19.0 (versions.py). eod_id is the
# tokenizer's (known from the command line for NullTokenizer only); pad_id -1 is GPTDataset's
# "no pad token".
COLLATOR_DEFAULTS = {"reset_position_ids": False, "reset_attention_mask": False, "eod_mask_loss": False,
                     "create_attention_mask": True, "inter_document_masking": False, "eod_id": None, "pad_id": -1}
# Megatron arguments that each set one keyword: flag -> (keyword, how argparse reads it).
ONE_TO_ONE = {
    "--seq-length": ("seq_length", int),
    "--seed": ("seed", int),
    "--split": ("split_ratios", str),
    "--mid-level-dataset-surplus": ("mid_level_dataset_surplus", float),
    "--reset-position-ids": ("reset_position_ids", True),
    "--reset-attention-mask": ("reset_attention_mask", True),
    "--eod-mask-loss": ("eod_mask_loss", True),
    "--no-create-attention-mask-in-dataloader": ("create_attention_mask", False),
    "--dataloader-inter-document-masking": ("inter_document_masking", True),
}
# Megatron arguments under which Megatron-LM builds other samples or another loader than
# GPTDataset's with MegatronPretrainingSampler: refused, naming the flag.
UNSUPPORTED = {
    "--multiple-validation-sets": "load each validation prefix as a split of its own (valid_data_path)",
    "--step-batch-size-schedule": "Megatron-LM core_v0.19 refuses it with --global-batch-size, and without one "
                                  "the batch size depends on the data-parallel size; give --global-batch-size "
                                  "instead",
    "--sft": "Megatron-LM then builds SFTDataset (packed conversations), not GPTDataset",
    "--mock-data": "Megatron-LM then builds MockGPTDataset (generated tokens), reading no files",
    "--fim-data": "Megatron-LM then builds GPTFIMDataset (fill-in-the-middle rewrites of the samples)",
    # get_train_valid_test_num_samples and build_train_valid_test_data_loaders (core_v0.16.1 and
    # core_v0.19.0): the train split is built for the current phase only, and again at each transition.
    "--phase-transition-iterations": "Megatron-LM then builds the train split for the phase the run is in (the "
                                     "samples between two transitions, from the iteration it resumes at) and "
                                     "builds it again, with other samples, at each transition; one dataset "
                                     "cannot hold that order",
}
# Megatron arguments known not to change which samples come in which order (model, optimiser,
# parallelism, checkpointing, logging): ignored without a warning.
IGNORED = frozenset("""
num-layers hidden-size ffn-hidden-size num-attention-heads num-query-groups group-query-attention kv-channels
max-position-embeddings position-embedding-type rotary-base rotary-percent normalization norm-epsilon
swiglu untie-embeddings-and-output-weights disable-bias-linear attention-dropout hidden-dropout
init-method-std make-vocab-size-divisible-by padded-vocab-size tokenizer-model
vocab-file merge-file micro-batch-size lr min-lr lr-decay-style lr-decay-iters lr-decay-samples lr-warmup-iters
lr-warmup-samples lr-warmup-fraction weight-decay clip-grad adam-beta1 adam-beta2 adam-eps optimizer
bf16 fp16 fp8-format loss-scale initial-loss-scale tensor-model-parallel-size pipeline-model-parallel-size
context-parallel-size expert-model-parallel-size sequence-parallel use-distributed-optimizer
overlap-grad-reduce overlap-param-gather use-flash-attn attention-backend transformer-impl
recompute-activations recompute-granularity recompute-method recompute-num-layers save load save-interval
no-load-optim no-load-rng log-interval tensorboard-dir wandb-project wandb-exp-name timing-log-level
distributed-backend distributed-timeout-minutes num-workers data-cache-path mmap-bin-files no-mmap-bin-files
num-dataset-builder-threads use-mcore-models exit-interval exit-duration-in-mins legacy-tokenizer
dataloader-type use-checkpoint-args finetune ckpt-format
""".split())
# Megatron-LM's --eval-iters default (megatron/training/config/training_config.py, core_v0.19.0).
DEFAULT_EVAL_ITERS = 100


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="megatron_args", add_help=False, allow_abbrev=False,
                                exit_on_error=False)
    for flag, (keyword, kind) in ONE_TO_ONE.items():
        if isinstance(kind, bool):  # store_true / store_false, None when not given
            p.add_argument(flag, dest=keyword, action="store_const", const=kind)
        else:
            p.add_argument(flag, dest=keyword, type=kind)
    for name in ("--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"):
        p.add_argument(name, nargs="*")
    for name in ("--data-args-path", "--per-split-data-args-path", "--dataloader-type", "--tokenizer-type"):
        p.add_argument(name)
    for name in ("--train-samples", "--train-iters", "--global-batch-size", "--eval-iters", "--eval-interval",
                 "--start-eval-at-iter", "--eval-global-batch-size", "--eval-micro-batch-size", "--vocab-size",
                 "--null-tokenizer-eod-id", "--null-tokenizer-pad-id", "--micro-batch-size", *PARALLEL_SIZES,
                 "--tensor-parallel-num-weight-shards"):
        p.add_argument(name, type=int)
    p.add_argument("--rampup-batch-size", nargs=3, type=int)
    for name in ("--full-validation", "--skip-train", "--decrease-batch-size-if-needed"):
        p.add_argument(name, action="store_true")
    return p


def resolve(megatron_args: str | list[str] | None = None, *, megatron_version: str | None = None, opener=None,
            **explicit) -> "Resolution":
    """Megatron's arguments as :class:`Resolution`: a Megatron-LM command line
    (``megatron_args``, a string or a list of tokens; None for keywords only) and keywords
    (``explicit``: any of SETTINGS and COLLATOR_DEFAULTS; None means not given), the keywords
    overriding the command line. ``megatron_version`` ("core_v0.16" or "core_v0.19", the
    default) is the Megatron-LM release whose reading to follow; ``opener`` (``open``'s
    signature) reads the argument files, local files by default.

    Refused at once, naming the flag or keyword: an unknown keyword, an argument the version's
    Megatron-LM does not have, an UNSUPPORTED one, a near miss of one read here. The settings
    and plans are worked out (and the argument files read) when first asked for."""
    version = check_version(megatron_version)
    unknown = sorted(set(explicit) - set(SETTINGS) - set(COLLATOR_DEFAULTS))
    if unknown:
        raise ParameterError(
            f"{', '.join(f'{name}=' for name in unknown)} is not a Megatron setting; the settings are "
            f"{', '.join(SETTINGS)} and MegatronCollator's {', '.join(COLLATOR_DEFAULTS)}")
    command = _parse(megatron_args) if megatron_args else None
    if command is not None:
        _check_command_line(*command, version)
    return Resolution(command, {k: v for k, v in explicit.items() if v is not None}, version, opener)


class Resolution:
    """What :func:`resolve` gives.

    ``settings``: the samples' settings, every key of SETTINGS (None where nothing gives one).
    ``plans``: the per-split plans (a SplitPlan by split name, megatron_plan's), before any file is opened.
    ``collator_flags``: MegatronCollator's keywords (every key of COLLATOR_DEFAULTS).
    ``megatron_version``: the Megatron-LM release followed.

    ``collator_flags`` read no file; ``settings`` and ``plans`` are worked out when first asked
    for, so a collator built from a command line whose argument files are remote reads none of them.
    """

    def __init__(self, command, explicit: dict, megatron_version: str, opener=None):
        self.megatron_version = megatron_version
        self._command, self._explicit, self._opener = command, explicit, opener
        flags = {**COLLATOR_DEFAULTS, **(_command_line_flags(command[1], megatron_version) if command else {})}
        flags.update((k, v) for k, v in explicit.items() if k in COLLATOR_DEFAULTS)
        if flags["inter_document_masking"]:
            # Megatron-LM's validate_args turns the mask off: the dataset returns cu_seqlens instead
            # (megatron/training/arguments.py:1300-1304 at core_v0.19.0).
            flags["create_attention_mask"] = False
        self.collator_flags = flags

    @functools.cached_property
    def settings(self) -> dict:
        given = _command_line_settings(self._command[1], self.megatron_version, self._opener,
                                       self._command[0]) if self._command else {}
        explicit = {k: v for k, v in self._explicit.items() if k in SETTINGS}
        if any(name in explicit for name in BLEND_SETTINGS):
            given = {k: v for k, v in given.items() if k not in BLEND_SETTINGS}  # a blend is replaced whole
            if "data_path" not in explicit:
                given.pop("split_ratios", None)  # --split goes with --data-path, not per-split blends
        settings = {**SETTINGS, **given, **explicit}
        check_settings(seq_length=settings["seq_length"], seed=settings["seed"])
        check_seq_length(settings["seq_length"])
        return settings

    @functools.cached_property
    def plans(self) -> dict[str, SplitPlan]:
        return megatron_plan(**{k: v for k, v in self.settings.items() if k not in SAMPLING_SETTINGS})

    def __repr__(self) -> str:
        return f"Resolution(megatron_version={self.megatron_version!r}, collator_flags={self.collator_flags!r})"


# --- the command line ------------------------------------------------------------------------

# An argument file lists prefixes (or per-split lists, as JSON): far below this.
ARGUMENT_FILE_LIMIT = 64 << 20
# The arguments that name files: prefixes (with weights), and files of such tokens.
PATH_ARGUMENTS = BLEND_SETTINGS
FILE_ARGUMENTS = ("data_args_path", "per_split_data_args_path")


def _parse(command_line: str | list[str]):
    """The tokens, argparse's namespace and the tokens it did not know."""
    if not isinstance(command_line, (str, list, tuple)):
        raise ParameterError(f"megatron_args must be a command line (a string or a list of tokens), "
                             f"got {type(command_line).__name__}")
    try:
        tokens = shlex.split(command_line) if isinstance(command_line, str) else [str(t) for t in command_line]
        args, rest = _parser().parse_known_args(tokens)
    except (argparse.ArgumentError, ValueError) as error:
        raise ParameterError(f"megatron_args: {error}") from None
    return tokens, args, rest


def _check_command_line(tokens: list[str], args, rest: list[str], version: str) -> None:
    """What is refused whatever is asked of the command line (the module docstring)."""
    given = {t.split("=")[0] for t in tokens if t.startswith("--")}
    check_arguments_exist(given, version)
    refused = [flag for flag in UNSUPPORTED if flag in given]
    if refused:
        raise ParameterError(f"megatron_args: {refused[0]} is not supported: {UNSUPPORTED[refused[0]]}")
    check_parses(tokens, version)
    if args.dataloader_type not in (None, "single"):
        raise ParameterError(f"megatron_args: --dataloader-type {args.dataloader_type} is not supported; "
                             "'single' (MegatronPretrainingSampler) is what megatron_rank_stream reproduces")
    check_batch_sizes(args, tokens, version)
    unknown = sorted({t.split("=")[0] for t in rest if t.startswith("--")} - {f"--{n}" for n in IGNORED})
    if unknown:
        warn_once(f"megatron_args: ignored, not read here: {', '.join(flag[2:] for flag in unknown)}; the "
                      "samples equal Megatron-LM's only if these arguments do not change them", stacklevel=4)


def _command_line_flags(args, version: str) -> dict:
    """MegatronCollator's keywords the command line gives (ONE_TO_ONE's, and NullTokenizer's ids)."""
    flags = {keyword: getattr(args, keyword) for keyword, _ in ONE_TO_ONE.values()
             if keyword in COLLATOR_DEFAULTS and getattr(args, keyword) is not None}
    if args.tokenizer_type == "NullTokenizer" and args.vocab_size is not None:
        flags.update(null_tokenizer_ids(args.vocab_size, version, args.null_tokenizer_eod_id,
                                        args.null_tokenizer_pad_id))
    return flags


def _command_line_settings(args, version: str, opener=None, tokens=()) -> dict:
    """The samples' settings the command line gives (the module docstring), its argument files
    read through ``opener``."""
    args = argparse.Namespace(**vars(args))  # train_iters is worked out below; the caller's stays
    if args.global_batch_size is None:
        args.global_batch_size = derived_global_batch_size(args, tokens)
    if args.seq_length is None:
        raise ParameterError("megatron_args: --seq-length is required")
    if args.data_path is not None and args.data_args_path is not None:
        raise ParameterError("megatron_args: give --data-path or --data-args-path, not both")
    data_path = args.data_path
    if args.data_args_path is not None:
        if args.split_ratios is None:
            # Megatron-LM applies its legacy default split only with --data-path; megatron-core
            # then asserts that a blend has a split.
            raise ParameterError("megatron_args: --data-args-path needs --split (Megatron applies the default "
                                 "\"969, 30, 1\" only with --data-path)")
        data_path = _read_tokens(args.data_args_path, "--data-args-path", opener)
    per_split = {name: getattr(args, name) for name in BLEND_SETTINGS[1:]}
    if args.per_split_data_args_path is not None:
        per_split = _read_per_split(args.per_split_data_args_path, opener)
    if args.train_samples and args.train_iters is not None:
        raise ParameterError("megatron_args: give --train-samples or --train-iters, not both (Megatron-LM refuses both)")
    if args.rampup_batch_size is not None and version == "core_v0.16" and not args.train_samples:
        raise ParameterError("megatron_args: --rampup-batch-size needs --train-samples at Megatron-LM core_v0.16 "
                             "(its validate_args asserts 'expected no batch-size rampup for iteration-based training')")
    if args.train_samples:  # Megatron tests it for truth: 0 falls back to iterations
        train = args.train_samples
        if args.train_iters is None and args.global_batch_size:
            # update_train_iters; core_v0.19 no longer reads --rampup-batch-size there.
            if args.rampup_batch_size is not None and version == "core_v0.16":
                args.train_iters = rampup_train_iters(args.train_samples, args.global_batch_size,
                                                      args.rampup_batch_size)
            else:
                args.train_iters = args.train_samples // args.global_batch_size
    elif args.train_iters is not None and args.global_batch_size is not None:
        train = args.train_iters * args.global_batch_size
    else:
        raise ParameterError("megatron_args: give --train-samples, or --train-iters with --global-batch-size")
    if args.train_iters is None and not args.skip_train and not args.full_validation:
        raise ParameterError("megatron_args: --train-iters is needed to count evaluation points")
    eval_iters = DEFAULT_EVAL_ITERS if args.eval_iters is None else args.eval_iters
    settings = {keyword: getattr(args, keyword) for keyword, _ in ONE_TO_ONE.values()
                if keyword in SETTINGS and getattr(args, keyword) is not None}
    settings["num_samples"] = {"train": train, "validation": _eval_samples(args, eval_iters),
                               "test": eval_iters * (args.eval_global_batch_size or args.global_batch_size)}
    if data_path is not None:
        settings["data_path"] = data_path
    else:
        # --split goes with --data-path only. (Megatron-LM hands it to megatron-core beside the
        # per-split blends, which asserts; read here as before, without it.)
        settings.pop("split_ratios", None)
        settings.update({k: v for k, v in per_split.items() if v is not None})
    return settings


def _eval_samples(args, eval_iters: int) -> int | None:
    """``get_train_valid_test_num_samples``'s validation size."""
    if args.full_validation:
        return None
    eval_batch = args.eval_global_batch_size or args.global_batch_size
    if args.skip_train:
        return eval_iters * eval_batch
    if args.eval_interval is None:
        # Megatron-LM (since core_v0.16) has no default here and fails on train_iters // None.
        raise ParameterError("megatron_args: --eval-interval is needed to count evaluation points "
                             "(or pass --full-validation or --skip-train)")
    interval = args.eval_interval
    points = args.train_iters // interval + 1
    if args.start_eval_at_iter is not None:
        points = max(0, points - args.start_eval_at_iter // interval)
    return points * eval_iters * eval_batch


# --- the argument files ----------------------------------------------------------------------

def _read_text(path: str, what: str, opener=None) -> str:
    """An argument file's text. ``opener`` (``open``'s signature) reads a remote file; None, a local one."""
    try:
        data = read_small_file(path, ARGUMENT_FILE_LIMIT, opener)
        return data.decode("utf-8")
    except FormatError as error:
        raise ParameterError(f"{what} {error}") from None
    except OSError as error:
        raise ParameterError(f"{what} {path}: cannot read it ({error.strerror or type(error).__name__})") from None
    except UnicodeDecodeError as error:
        raise ParameterError(f"{what} {path}: not UTF-8 text (byte {error.start:,}); expected Megatron's "
                             "--data-path tokens") from None


def _file_blend(tokens, path: str, what: str) -> list[str]:
    """``tokens`` read from an argument file, checked as a blend now: a later error about them
    would quote them, and the file may be anything on the machine."""
    try:
        parse_data_path(tokens, what)
    except ParameterError:
        raise ParameterError(f"{what} {path}: does not hold Megatron's --data-path tokens (prefixes, or "
                             "weight/prefix pairs)") from None
    return tokens if isinstance(tokens, str) else [str(t) for t in tokens]


def _read_tokens(path: str, what: str, opener=None) -> list[str]:
    return _file_blend(_read_text(path, what, opener).split(), path, what)


def _read_per_split(path: str, opener=None) -> dict:
    what = "--per-split-data-args-path"
    text = _read_text(path, what, opener)
    try:
        loaded = json.loads(text)
    except (ValueError, RecursionError) as error:
        # json's messages give a position, never the text.
        why = "nested too deeply" if isinstance(error, RecursionError) else error
        raise ParameterError(f"{what} {path}: not JSON ({why})") from None
    per_split = {}
    for key, value in _per_split_paths(loaded, path).items():  # Megatron-LM's object and key rules
        name = key[:-len("_data_path")]
        tokens_ok = isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                                    for v in value)
        if value is not None and not (isinstance(value, str) or tokens_ok):
            raise ParameterError(f"{what} {path}: {name!r} must be a list of tokens or one string, found a "
                                 f"{type(value).__name__}")
        per_split[f"{name}_data_path"] = None if value is None else _file_blend(value, path, f"{what} ({name})")
    return per_split


def _per_split_paths(loaded, path: str) -> dict:
    """``--per-split-data-args-path``'s JSON as Megatron-LM reads it: an object with the keys
    "train", "valid" and "test" (each a blend, or null for no such split); a missing key is a
    KeyError in Megatron-LM (``get_blend_and_blend_per_split``)."""
    if not isinstance(loaded, dict):
        raise ParameterError(f"--per-split-data-args-path {path}: expected a JSON object with the keys \"train\", "
                             f"\"valid\" and \"test\", found {type(loaded).__name__}")
    missing = [name for name in ("train", "valid", "test") if name not in loaded]
    if missing:
        raise ParameterError(
            f"--per-split-data-args-path {path}: no {', '.join(repr(m) for m in missing)} key (found "
            f"{sorted(loaded)}); Megatron-LM reads all of \"train\", \"valid\" and \"test\" and fails with KeyError "
            "otherwise: give a split you do not want as null")
    return {f"{name}_data_path": loaded[name] for name in ("train", "valid", "test")}


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


# --- the command line as paths, for dataset cards --------------------------------------------

def named_paths(command_line: str | list[str]) -> dict[str, list[str]]:
    """What each path-bearing argument of a command line names, before any file is read:
    the tokens of --data-path and the per-split paths (weights among them), and the argument files."""
    _, args, _ = _parse(command_line)
    named = {name: getattr(args, name) for name in PATH_ARGUMENTS if getattr(args, name)}
    named.update({name: [getattr(args, name)] for name in FILE_ARGUMENTS if getattr(args, name) is not None})
    return named


def inline_argument_files(command_line: str | list[str], opener=None) -> str:
    """The command line with ``--data-args-path FILE`` and ``--per-split-data-args-path FILE``
    replaced by the tokens the files hold (as ``--data-path ...``, ``--train-data-path ...``),
    read through ``opener``; every other token kept. Refuses what :func:`resolve` refuses."""
    tokens, args, _ = _parse(command_line)
    if all(getattr(args, name) is None for name in FILE_ARGUMENTS):
        return command_line if isinstance(command_line, str) else shlex.join(tokens)
    settings = resolve(tokens, opener=opener).settings
    spelled = {f"--{name.replace('_', '-')}" for name in (*FILE_ARGUMENTS, *PATH_ARGUMENTS)}
    kept, skipping = [], False
    for token in tokens:
        option = token.split("=", 1)[0]
        if option in spelled:
            skipping = "=" not in token
        elif skipping and not (token.startswith("-") and not _is_number(token)):
            continue  # a value of the argument replaced (argparse stops at the next option)
        else:
            skipping = False
            kept.append(token)
    for name in PATH_ARGUMENTS:
        if settings.get(name) is not None:
            value = settings[name]
            kept += [f"--{name.replace('_', '-')}", *(value.split() if isinstance(value, str) else value)]
    return shlex.join(kept)


__all__ = ["BLEND_SETTINGS", "COLLATOR_DEFAULTS", "ONE_TO_ONE", "Resolution", "SETTINGS", "UNSUPPORTED",
           "inline_argument_files", "named_paths", "resolve"]
