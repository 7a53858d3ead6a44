"""A Megatron-LM command line read as the data settings it implies.

Which arguments touch the data, and how (Megatron-LM ``megatron/training/arguments.py``,
``training.py:get_train_valid_test_num_samples``, ``utils/common_utils.py:
get_blend_and_blend_per_split``, ``pretrain_gpt.py``):

    --data-path, --data-args-path (a file of the same tokens)      data_path
    --split (default "969, 30, 1" with --data-path)                split_ratios
    --train/valid/test-data-path, --per-split-data-args-path (JSON) train/valid/test_data_path
    --seq-length, --seed (default 1234), --mid-level-dataset-surplus
    --train-samples, or --train-iters x --global-batch-size        num_samples["train"]
    --eval-iters (100), --eval-interval (required), --full-validation,  num_samples["validation"],
    --skip-train, --eval-global-batch-size                         num_samples["test"]

The collator's flags (--reset-position-ids, --reset-attention-mask, --eod-mask-loss,
--no-create-attention-mask-in-dataloader, --dataloader-inter-document-masking, and the EOD and
pad ids of ``--tokenizer-type NullTokenizer --vocab-size V``) do not change the samples: they
are returned in ``collator_flags`` for ``MegatronCollator``. Where Megatron-LM versions differ
(``--rampup-batch-size``, NullTokenizer's EOD, which options exist), ``megatron_version``
picks one (versions.py). Every other
argument is ignored; names this module does not know as Megatron's are listed in a warning.
A command line is parsed with argparse because it is one (the library's own API takes plain
keyword arguments).

The argument files are read as small regular files (a FIFO or a device in their place is
refused, not read without end), and an error about what one holds never quotes it: the
file may be any file on the machine. :func:`inline_argument_files` puts their tokens into
the command line itself, so that a dataset card's command line names every path it reaches
(hf/card_scope.py checks them).
"""

from __future__ import annotations

import argparse
import json
import shlex
import warnings

from .._io import read_small_file
from ..errors import FormatError, ParameterError
from .versions import check_arguments_exist, check_version, null_tokenizer_ids, rampup_train_iters

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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="megatron_args", add_help=False, allow_abbrev=False,
                                exit_on_error=False)
    for name in ("--data-path", "--train-data-path", "--valid-data-path", "--test-data-path"):
        p.add_argument(name, nargs="*")
    for name in ("--split", "--data-args-path", "--per-split-data-args-path", "--dataloader-type", "--tokenizer-type",
                 "--step-batch-size-schedule"):
        p.add_argument(name)
    for name in ("--seq-length", "--seed", "--train-samples", "--train-iters", "--global-batch-size",
                 "--eval-iters", "--eval-interval", "--start-eval-at-iter", "--eval-global-batch-size",
                 "--eval-micro-batch-size", "--vocab-size", "--null-tokenizer-eod-id", "--null-tokenizer-pad-id"):
        p.add_argument(name, type=int)
    p.add_argument("--rampup-batch-size", nargs=3, type=int)
    p.add_argument("--mid-level-dataset-surplus", type=float)
    for name in ("--full-validation", "--skip-train", "--multiple-validation-sets", "--reset-position-ids",
                 "--reset-attention-mask", "--eod-mask-loss", "--no-create-attention-mask-in-dataloader",
                 "--dataloader-inter-document-masking"):
        p.add_argument(name, action="store_true")
    return p


# An argument file lists prefixes (or per-split lists, as JSON): far below this.
ARGUMENT_FILE_LIMIT = 64 << 20
# The arguments that name files: prefixes (with weights), and files of such tokens.
PATH_ARGUMENTS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")
FILE_ARGUMENTS = ("data_args_path", "per_split_data_args_path")


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
    from .plan import parse_data_path

    try:
        parse_data_path(tokens, what)
    except ParameterError:
        raise ParameterError(f"{what} {path}: does not hold Megatron's --data-path tokens (prefixes, or "
                             "weight/prefix pairs, each prefix once)") from None
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


def _eval_samples(args, global_batch_size: int) -> int | None:
    """``get_train_valid_test_num_samples``'s validation size."""
    if args.full_validation:
        return None
    eval_iters = 100 if args.eval_iters is None else args.eval_iters
    eval_batch = args.eval_global_batch_size or global_batch_size
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


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


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
    read through ``opener``; every other token kept. Refuses what settings_from_megatron_args refuses."""
    tokens, args, _ = _parse(command_line)
    if all(getattr(args, name) is None for name in FILE_ARGUMENTS):
        return command_line if isinstance(command_line, str) else shlex.join(tokens)
    settings = settings_from_megatron_args(tokens, opener)
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


def settings_from_megatron_args(command_line: str | list[str], opener=None,
                                megatron_version: str | None = None) -> dict:
    """The builder settings a Megatron command line implies (module docstring), plus
    ``collator_flags``: MegatronCollator's keyword arguments for the same run, as Megatron-LM
    ``megatron_version`` ("core_v0.16" or "core_v0.19", the default) derives them. ``opener``
    (``open``'s signature) reads the argument files; by default they are local files."""
    version = check_version(megatron_version)
    tokens, args, rest = _parse(command_line)
    check_arguments_exist({t.split("=")[0] for t in tokens if t.startswith("--")}, version)
    unknown = sorted({t[2:].split("=")[0] for t in rest if t.startswith("--")} - IGNORED)
    if unknown:
        warnings.warn(f"megatron_args: not known as Megatron data arguments, ignored: {', '.join(unknown)}",
                      stacklevel=3)
    if args.multiple_validation_sets:
        raise ParameterError("megatron_args: --multiple-validation-sets is not supported; load each validation "
                             "prefix as a split of its own (valid_data_path)")
    if args.dataloader_type not in (None, "single"):
        raise ParameterError(f"megatron_args: --dataloader-type {args.dataloader_type} is not supported; "
                             "'single' (MegatronPretrainingSampler) is what megatron_rank_stream reproduces")
    if args.seq_length is None:
        raise ParameterError("megatron_args: --seq-length is required")
    if args.data_path is not None and args.data_args_path is not None:
        raise ParameterError("megatron_args: give --data-path or --data-args-path, not both")
    data_path = args.data_path
    if args.data_args_path is not None:
        if args.split is None:
            # Megatron-LM applies its legacy default split only with --data-path; megatron-core
            # then asserts that a blend has a split.
            raise ParameterError("megatron_args: --data-args-path needs --split (Megatron applies the default "
                                 "\"969, 30, 1\" only with --data-path)")
        data_path = _read_tokens(args.data_args_path, "--data-args-path", opener)
    per_split = {"train_data_path": args.train_data_path, "valid_data_path": args.valid_data_path,
                 "test_data_path": args.test_data_path}
    if args.per_split_data_args_path is not None:
        per_split = _read_per_split(args.per_split_data_args_path, opener)
    if args.train_samples and args.train_iters is not None:
        raise ParameterError("megatron_args: give --train-samples or --train-iters, not both (Megatron-LM refuses both)")
    if args.step_batch_size_schedule is not None:
        raise ParameterError("megatron_args: --step-batch-size-schedule is not supported (Megatron-LM core_v0.19 "
                             "refuses it with --global-batch-size, and without one the batch size depends on the "
                             "data-parallel size); give --global-batch-size instead")
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
    if args.global_batch_size is None:
        raise ParameterError("megatron_args: --global-batch-size is required (the evaluation sizes need it)")
    if args.train_iters is None and not args.skip_train and not args.full_validation:
        raise ParameterError("megatron_args: --train-iters is needed to count evaluation points")
    settings = {
        "seq_length": args.seq_length,
        "seed": 1234 if args.seed is None else args.seed,
        "num_samples": {"train": train, "validation": _eval_samples(args, args.global_batch_size),
                        "test": (100 if args.eval_iters is None else args.eval_iters)
                        * (args.eval_global_batch_size or args.global_batch_size)},
    }
    if data_path is not None:
        settings.update(data_path=data_path, split_ratios=args.split)
    else:
        settings.update({k: v for k, v in per_split.items() if v is not None})
    if args.mid_level_dataset_surplus is not None:
        settings["mid_level_dataset_surplus"] = args.mid_level_dataset_surplus
    settings["collator_flags"] = {
        "reset_position_ids": args.reset_position_ids, "reset_attention_mask": args.reset_attention_mask,
        "eod_mask_loss": args.eod_mask_loss, "create_attention_mask": not args.no_create_attention_mask_in_dataloader,
        "inter_document_masking": args.dataloader_inter_document_masking}
    if args.tokenizer_type == "NullTokenizer" and args.vocab_size is not None:
        settings["collator_flags"].update(null_tokenizer_ids(args.vocab_size, version, args.null_tokenizer_eod_id,
                                                             args.null_tokenizer_pad_id))
    return settings


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


__all__ = ["inline_argument_files", "named_paths", "settings_from_megatron_args"]

