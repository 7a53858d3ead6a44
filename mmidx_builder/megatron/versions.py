"""Where Megatron-LM versions disagree on the data path, in one place.

``megatron_args`` follows one documented Megatron-LM version (``megatron_version``; the newest
is the default). What differs between the two it knows, read from Megatron-LM at each tag
(``megatron/training/{arguments,training,global_vars}.py``, ``datasets/data_samplers.py``)
and megatron-core's ``NullTokenizer`` of the paired wheel:

    rule                            core_v0.16 (megatron-core 0.16.1)   core_v0.19 (0.19.2)
    --rampup-batch-size S I N       counted in train_iters when         parsed, read by nothing:
                                    --train-samples is given            train_iters = samples // gbs
                                    (update_train_iters); refused with
                                    --train-iters (validate_args asserts)
    NullTokenizer EOD               --vocab-size                        --vocab-size - 1, or
                                                                        --null-tokenizer-eod-id
    arguments that exist            (none of the column on the right)   --eval-global-batch-size,
                                                                        --eval-micro-batch-size,
                                                                        --start-eval-at-iter,
                                                                        --dataloader-inter-document-masking,
                                                                        --null-tokenizer-eod-id/-pad-id
    --full-validation loader        MegatronPretrainingSampler          one sample per rank and step
                                    (micro-batch size, drop last)       (MegatronFullValidationSampler)

The last row is the loader's, not the samples': megatron_rank_stream(..., micro_batch_size=1)
gives a rank's validation rows at core_v0.19 (docs/megatron-lm-oracle.md).
"""

from __future__ import annotations

from ..errors import ParameterError

MEGATRON_VERSIONS = ("core_v0.16", "core_v0.19")
DEFAULT_MEGATRON_VERSION = MEGATRON_VERSIONS[-1]
# Command-line options Megatron-LM core_v0.16.1's parse_args does not know (it exits on them).
SINCE_CORE_V0_19 = ("--eval-global-batch-size", "--eval-micro-batch-size", "--start-eval-at-iter",
                    "--dataloader-inter-document-masking", "--null-tokenizer-eod-id", "--null-tokenizer-pad-id")


def check_version(version) -> str:
    """``megatron_version`` as given (``None``: the newest), or a ParameterError listing the known ones."""
    if version is None:
        return DEFAULT_MEGATRON_VERSION
    if version not in MEGATRON_VERSIONS:
        raise ParameterError(f"megatron_version must be one of {', '.join(map(repr, MEGATRON_VERSIONS))} (the "
                             f"Megatron-LM release whose data path to follow), got {version!r}")
    return version


def check_arguments_exist(given: set[str], version: str) -> None:
    """Refuses options the version's Megatron-LM does not parse (it would exit with a usage error)."""
    if version == "core_v0.16":
        missing = sorted(given & set(SINCE_CORE_V0_19))
        if missing:
            raise ParameterError(f"megatron_args: {', '.join(missing)} is not an argument of Megatron-LM core_v0.16 "
                                 "(it came with core_v0.19); drop it or pass megatron_version='core_v0.19'")


def rampup_train_iters(train_samples: int, global_batch_size: int, rampup: list[int]) -> int:
    """Megatron-LM core_v0.16's ``update_train_iters`` with ``--rampup-batch-size START INCR
    SAMPLES``: iterations of the ramp-up (batch ``START + INCR * int(consumed / (SAMPLES /
    increments))`` while at most SAMPLES are consumed) plus whole global batches after it.
    The checks are those of megatron-core 0.16.1's RampupBatchsizeNumMicroBatchesCalculator."""
    start, increment, rampup_samples = rampup
    if start <= 0 or increment <= 0 or rampup_samples < 0:
        raise ParameterError(f"--rampup-batch-size {start} {increment} {rampup_samples}: the start and increment "
                             "must be positive and the samples non-negative (megatron-core asserts it)")
    difference = global_batch_size - start
    if difference <= 0 or difference % increment:
        # A difference of 0 divides by zero increments in megatron-core 0.16.1.
        raise ParameterError(f"--rampup-batch-size {start} {increment} {rampup_samples} with --global-batch-size "
                             f"{global_batch_size}: the global batch size must exceed the start by a multiple of "
                             "the increment (megatron-core's ramp-up calculator fails otherwise)")
    per_increment = rampup_samples / (difference // increment)
    iterations = consumed = 0
    while consumed <= rampup_samples and consumed <= train_samples:
        batch = global_batch_size if consumed > rampup_samples else start + int(consumed / per_increment) * increment
        consumed += batch
        iterations += 1
    if train_samples > consumed:
        iterations += (train_samples - consumed) // global_batch_size
    return iterations


def null_tokenizer_ids(vocab_size: int, version: str, eod_id: int | None = None,
                       pad_id: int | None = None) -> dict:
    """The EOD and pad ids megatron-core's NullTokenizer gives GPTDataset for ``--vocab-size``:
    0.16.1 counts the EOD past the vocabulary (``vocab_size``), 0.19.2 takes the vocabulary's
    last id (``vocab_size - 1``) unless ``--null-tokenizer-eod-id`` says otherwise. The pad id is
    -1 (none) unless ``--null-tokenizer-pad-id`` gives one; GPTDataset replaces a pad id equal to
    the EOD by -1."""
    if version == "core_v0.16":
        eod = vocab_size
    else:
        eod = vocab_size - 1 if eod_id is None else eod_id
    pad = -1 if pad_id is None or pad_id == eod else pad_id
    return {"eod_id": eod, "pad_id": pad}


__all__ = ["DEFAULT_MEGATRON_VERSION", "MEGATRON_VERSIONS", "check_version", "null_tokenizer_ids",
           "rampup_train_iters"]
