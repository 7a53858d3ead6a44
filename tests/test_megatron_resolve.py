"""megatron.resolve: one reading of Megatron's arguments for the builder, the CLI and the collator.

The defaults and the reading of each collator flag are Megatron-LM's own (its parse_args,
validate_args and pretrain_gpt.core_gpt_dataset_config_from_args, run from the pinned
archive); that the flags then make megatron-core's batches is test_training_collator.py's
test_from_megatron_args_gives_the_batches_of_megatron_lms_config.
"""

from __future__ import annotations

import json
import shlex
import warnings

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.megatron import Resolution, resolve
from mmidx_builder.megatron.args import COLLATOR_DEFAULTS, SETTINGS, UNSUPPORTED

from megatron_lm_archive import ORACLES, megatron_lm_reading

SIZES = "--global-batch-size 8 --train-iters 10 --eval-interval 5 --eval-iters 1"
RUN = f"--data-path 0.4 A 0.6 B --split 90,8,2 --seq-length 16 {SIZES}"
# What Megatron-LM needs besides the data arguments to get to its dataset config.
MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 64 --micro-batch-size 1 "
         "--tokenizer-type NullTokenizer --vocab-size 100")
FLAG_LINES = ["", "--reset-position-ids", "--reset-attention-mask --eod-mask-loss",
              "--no-create-attention-mask-in-dataloader", "--dataloader-inter-document-masking",
              "--dataloader-inter-document-masking --no-create-attention-mask-in-dataloader --reset-position-ids",
              "--reset-position-ids --reset-attention-mask --eod-mask-loss --no-create-attention-mask-in-dataloader "
              "--seed 77 --null-tokenizer-pad-id 7"]
CONFIG_FIELDS = {"reset_position_ids": "reset_position_ids", "reset_attention_mask": "reset_attention_mask",
                 "eod_mask_loss": "eod_mask_loss", "create_attention_mask": "create_attention_mask",
                 "inter_document_masking": "inter_document_masking", "eod": "eod_id", "pad": "pad_id"}


def test_one_result_holds_settings_plans_and_collator_flags():
    resolution = resolve(f"{RUN} --reset-position-ids --seed 9")
    assert isinstance(resolution, Resolution)
    assert set(resolution.settings) == set(SETTINGS) and set(resolution.collator_flags) == set(COLLATOR_DEFAULTS)
    assert resolution.settings["seq_length"] == 16 and resolution.settings["seed"] == 9
    assert resolution.settings["num_samples"] == {"train": 80, "validation": 24, "test": 8}
    assert list(resolution.plans) == ["train", "validation", "test"]
    assert [p.prefix for p in resolution.plans["train"].parts] == ["A", "B"]
    assert resolution.collator_flags["reset_position_ids"] is True
    # Keywords alone: this package's seq_length default and Megatron-LM's seed and flags.
    alone = resolve(data_path=["A"])
    assert (alone.settings["seq_length"], alone.settings["seed"]) == (2048, 1234)
    assert alone.collator_flags == COLLATOR_DEFAULTS


def test_the_resolver_is_the_one_list_of_megatron_settings():
    """A new setting is a SETTINGS entry: load_dataset's config takes every one (datasets needs a
    field per keyword), the plan every one but the shared sampling settings, and the builder
    is picked by each one a .bin/.idx load does not have."""
    import dataclasses
    import inspect

    from mmidx_builder.hf.gpt_samples import GPTConfig
    from mmidx_builder.hf.mmidx_megatron import OWN_SETTINGS, MegatronConfig
    from mmidx_builder.megatron.args import SAMPLING_SETTINGS, megatron_plan

    assert set(SETTINGS) <= {f.name for f in dataclasses.fields(MegatronConfig)}
    assert set(SETTINGS) - set(SAMPLING_SETTINGS) == set(inspect.signature(megatron_plan).parameters)
    assert set(OWN_SETTINGS) == {"megatron_args", "megatron_version"} | (
        set(SETTINGS) - {f.name for f in dataclasses.fields(GPTConfig)})


def test_explicit_keywords_override_the_command_line():
    command = f"{RUN} --reset-position-ids --eod-mask-loss --seed 9"
    resolution = resolve(command, seq_length=32, seed=3, reset_position_ids=False, create_attention_mask=False,
                         eod_id=5, num_samples={"train": 7})
    assert (resolution.settings["seq_length"], resolution.settings["seed"]) == (32, 3)
    assert resolution.settings["num_samples"] == {"train": 7}
    assert resolution.collator_flags == {**COLLATOR_DEFAULTS, "eod_mask_loss": True, "reset_position_ids": False,
                                         "create_attention_mask": False, "eod_id": 5}
    # None is "not given": the command line's value stays.
    assert resolve(command, seed=None, eod_mask_loss=None).settings["seed"] == 9
    # An explicit blend replaces the command line's whole blend.
    replaced = resolve(command, train_data_path=["C"], valid_data_path=["D"])
    assert (replaced.settings["data_path"], replaced.settings["train_data_path"]) == (None, ["C"])
    assert [p.parts[0].prefix for p in replaced.plans.values()] == ["C", "D"]


def test_unknown_keywords_are_refused_by_name():
    with pytest.raises(ParameterError, match=r"reset_positon_ids= is not a Megatron setting.*reset_position_ids"):
        resolve(RUN, reset_positon_ids=True)


@pytest.mark.parametrize("flag", sorted(UNSUPPORTED))
def test_unsupported_megatron_arguments_are_refused_by_name(flag):
    value = " '0:4 64:8'" if flag == "--step-batch-size-schedule" else ""
    with pytest.raises(ParameterError, match=f"{flag} is not supported"):
        resolve(f"{RUN} {flag}{value}")


@pytest.mark.parametrize("typo, meant", [("--reset-postion-ids", "--reset-position-ids"),
                                         ("--eod-mask-los", "--eod-mask-loss"),
                                         ("--no-create-attention-mask-in-dataloder",
                                          "--no-create-attention-mask-in-dataloader")])
def test_a_near_miss_of_a_flag_read_here_is_refused_naming_both(typo, meant):
    """Before, a misspelt collator flag was one more name in the "ignored" warning, and the
    batches silently lacked it."""
    with pytest.raises(ParameterError, match=f"{typo} is not an argument of Megatron-LM core_v0.19: its parser refuses "
                                             rf"it \(unrecognized arguments\); (did you mean|.*no abbreviations: write) {meant}\b"):
        resolve(f"{RUN} {typo}")


def test_the_collator_reads_no_argument_file(tmp_path):
    """The collator's flags need none of the data: a command line whose argument file is
    elsewhere (remote, or not there) still gives them; the settings are where it is read."""
    command = f"--data-args-path {tmp_path / 'absent.txt'} --split 1 --seq-length 8 {SIZES} --eod-mask-loss"
    resolution = resolve(command)
    assert resolution.collator_flags["eod_mask_loss"] is True
    with pytest.raises(ParameterError, match="absent.txt: cannot read it"):
        resolution.settings


def test_a_seed_numpy_cannot_take_is_refused_before_any_file_is_read():
    """On main the Megatron builder checked only seed >= 0 and failed later, in the shuffle."""
    from datasets import load_dataset_builder

    with pytest.raises(ParameterError, match=r"seed= must be below 2\*\*32 .*got 4294967296"):
        resolve(RUN, seed=2**32).settings
    with pytest.raises(ParameterError, match="seed= must be below 2"):
        load_dataset_builder("mmidx", data_path=["/nowhere/a_text_document"], seed=2**32)


def test_the_builder_and_the_cli_read_the_same_settings(tmp_path, capsys):
    """load_dataset(megatron_args=..., seed=...) and `mmidx samples --megatron-args ... --seed`
    resolve alike: the same first samples of each split."""
    from datasets import load_dataset

    from mmidx_builder.cli import main

    rng = np.random.default_rng(4)
    prefix = write_documents(tmp_path / "a_text_document", [rng.integers(0, 500, rng.integers(1, 40))
                                                            for _ in range(200)], dtype=np.uint16)
    command = f"--data-path {prefix} --split 90,8,2 --seq-length 12 {SIZES}"
    assert main(["samples", "--megatron-args", command, "--seed", "5", "--show", "0:3", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    loaded = load_dataset("mmidx", megatron_args=command, seed=5, cache_dir=str(tmp_path / "hf"))
    for split, shown in printed.items():
        assert [s["input_ids"] for s in shown["samples"]] == [row["input_ids"] for row in loaded[split].select(range(3))]


# --- Megatron-LM's own reading: one process per version for every test of this module ----------

# What Megatron-LM needs to reach its data path, without --micro-batch-size (the table sets it).
CHECK_MODEL = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 64 "
               "--tokenizer-type NullTokenizer --vocab-size 100 --data-path /d/a --split 1,0,0 --seq-length 8 "
               "--train-iters 10 --eval-interval 5 --eval-iters 1")
# (extra arguments, WORLD_SIZE, versions): accepted or refused by Megatron-LM's parse_args,
# validate_args and micro-batch calculator; resolve() must do the same.
BOTH = ("core_v0.16", "core_v0.19")
CHECKS = [
    ("--micro-batch-size 2 --global-batch-size 16", 4, BOTH),
    ("--micro-batch-size 2 --global-batch-size 12", 4, BOTH),            # 12 % (2 x 4)
    ("--micro-batch-size 2 --global-batch-size 12", 1, BOTH),
    ("--micro-batch-size 3 --global-batch-size 16", 1, BOTH),            # 16 % 3
    ("--micro-batch-size 2", 4, BOTH),                                   # derived: 8
    # (tensor and context parallel sizes above 1 need CUDA in Megatron-LM's validate_args)
    ("--micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2", 4, BOTH),
    ("--micro-batch-size 2 --global-batch-size 6 --pipeline-model-parallel-size 2", 4, BOTH),  # 6 % (2 x 2)
    ("--micro-batch-size 2 --global-batch-size 8 --pipeline-model-parallel-size 2", 3, BOTH),  # 3 % 2
    ("--micro-batch-size 0 --global-batch-size 8", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 0", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 8 --eval-global-batch-size 6", 4, ("core_v0.19",)),
    ("--micro-batch-size 2 --global-batch-size 8 --eval-global-batch-size 16", 4, ("core_v0.19",)),
    ("--micro-batch-size 2 --global-batch-size 8 --eval-global-batch-size 12 --eval-micro-batch-size 3", 4,
     ("core_v0.19",)),
    ("--micro-batch-size 2 --global-batch-size 16 --eval-micro-batch-size 3", 4, ("core_v0.19",)),  # 16 % 12
    ("--micro-batch-size 2 --global-batch-size 8 --phase-transition-iter 5", 1, BOTH),      # an abbreviation
    ("--micro-batch-size 2 --global-batch-size 8 --seq-len 8", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 8 --reset-postion-ids", 1, BOTH),
    ("--micro-batch-size two --global-batch-size 8", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 8 --lr abc", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 8 --tokenizer-type NoSuchTokenizer", 1, BOTH),
    ("--micro-batch-size 2 --global-batch-size 8 --seed 3 4", 1, BOTH),                      # a stray value
    ("--micro-batch-size 2 --global-batch-size 8 --timing-log-level 7", 1, BOTH),            # not a choice
    ("--micro-batch-size 2 --global-batch-size 8 --lr 1e-4 --timing-log-level 2 --bf16", 1, BOTH),
]


@pytest.fixture(scope="module")
def megatron_lm(tmp_path_factory):
    """Megatron-LM's reading at each version: its options and parser table, core_v0.19's
    GPTDatasetConfig for FLAG_LINES, and its verdict on each line of CHECKS."""
    def reading(version):
        argvs = [shlex.split(f"{MODEL} --data-path /d/a --split 1,0,0 --seq-length 8 {SIZES} {line}")
                 for line in FLAG_LINES] if version == "core_v0.19" else []
        checks = [(shlex.split(f"{CHECK_MODEL} {extra}"), world) for extra, world, versions in CHECKS
                  if version in versions]
        return megatron_lm_reading(version, argvs, tmp_path_factory.mktemp(version), checks)

    return {version: reading(version) for version in sorted(ORACLES)}


def test_collator_flags_and_defaults_are_megatron_lms(megatron_lm):
    """Megatron-LM core_v0.19.0's own parse_args / validate_args / core_gpt_dataset_config_from_args
    on each command line: its GPTDatasetConfig flags, EOD and pad are resolve()'s collator_flags."""
    argvs = [shlex.split(f"{MODEL} --data-path /d/a --split 1,0,0 --seq-length 8 {SIZES} {line}") for line in FLAG_LINES]
    theirs = megatron_lm["core_v0.19"]["configs"]
    for argv, config in zip(argvs, theirs, strict=True):
        ours = resolve(argv).collator_flags
        assert {mine: ours[mine] for mine in CONFIG_FIELDS.values()} == \
               {mine: config[field] for field, mine in CONFIG_FIELDS.items()}, shlex.join(argv)
        assert config["add_extra_token_to_sequence"] is True  # Megatron-LM never turns it off


@pytest.mark.parametrize("version", sorted(ORACLES))
def test_no_argument_of_megatron_lm_is_refused_as_unknown(version, megatron_lm):
    """Every option of Megatron-LM's parser at both tags is read, ignored, warned about or refused
    as unsupported, never refused as not Megatron-LM's (or as a near miss of another)."""
    options = megatron_lm[version]["options"]
    assert len(options) > 500
    values = {}  # a value Megatron-LM's parser takes, from its own table
    for line in megatron_lm[version]["spec"]:
        names, kind, nargs, typed, choices = line.split(" ")
        value = choices.split("|")[0] if choices != "-" else "1"
        count = 0 if kind != "store" or nargs == "*" else int(nargs) if nargs.isdigit() else 1
        for name in names.split(","):
            values[name] = " ".join([value] * count)
    values["--step-batch-size-schedule"] = "'0:4 64:8'"
    for option in options:
        if option == "--help":
            continue  # Megatron-LM prints its help and exits
        try:
            resolve(f"{RUN} {option} {values.get(option, '')}", megatron_version=version)
        except ParameterError as error:
            assert "did you mean" not in str(error) and "parser refuses" not in str(error), (option, error)


@pytest.mark.parametrize("version", sorted(ORACLES))
def test_the_parser_table_is_megatron_lms(version, megatron_lm):
    """mmidx_builder/megatron/lm_options.py equals what Megatron-LM's parser holds (regenerate it
    with `python tests/megatron_lm_archive.py` when this fails after the archives change)."""
    from mmidx_builder.megatron.lm_options import OPTIONS

    assert OPTIONS[version].splitlines() == megatron_lm[version]["spec"]


@pytest.mark.parametrize("version", sorted(ORACLES))
def test_accepts_and_refuses_what_megatron_lm_does(version, megatron_lm, monkeypatch):
    """Megatron-LM's parse_args, validate_args and micro-batch calculator against resolve() on a
    table of command lines (abbreviations, types, choices, batch sizes under WORLD_SIZE)."""
    cases = [(extra, world) for extra, world, versions in CHECKS if version in versions]
    verdicts = megatron_lm[version]["checks"]
    assert len(verdicts) == len(cases) and any(v["ok"] for v in verdicts) and not all(v["ok"] for v in verdicts)
    for (extra, world), theirs in zip(cases, verdicts):
        monkeypatch.setenv("WORLD_SIZE", str(world))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                resolve(f"{CHECK_MODEL} {extra}", megatron_version=version).settings
            ours = None
        except ParameterError as error:
            ours = str(error)
        assert (ours is None) == theirs["ok"], (extra, world, ours, theirs["error"])


def test_a_refusal_names_what_megatron_lm_would_say(monkeypatch):
    """The issue's cases, with the reason and the fix."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ParameterError, match="--phase-transition-iter is not an argument of Megatron-LM core_v0.19.*"
                                             "takes no abbreviations: write --phase-transition-iterations"):
        resolve(f"{RUN} --phase-transition-iter 5")
    with pytest.raises(ParameterError, match=r"evaluation batch \(--eval-global-batch-size 6\) is not divisible by "
                                             r"--micro-batch-size 2 x the data-parallel size 4"):
        resolve(f"{RUN} --micro-batch-size 2 --eval-global-batch-size 6")
    with pytest.raises(ParameterError, match="--global-batch-size 8 is not divisible by --micro-batch-size 4 x the "
                                             "data-parallel size 4"):
        resolve(f"{RUN} --micro-batch-size 4")


NO_BATCH = "--data-path 0.4 A 0.6 B --split 90,8,2 --seq-length 16 --train-iters 10 --eval-interval 5 --eval-iters 1"


def test_without_global_batch_size_it_is_derived_from_the_launchers_world_size(monkeypatch):
    """Megatron-LM's validate_args: --micro-batch-size x WORLD_SIZE / (tensor x pipeline x context
    parallel sizes); test_megatron_lm_oracle.py's derived_global_batch case runs Megatron-LM on it."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    settings = resolve(f"{NO_BATCH} --micro-batch-size 3 --tensor-model-parallel-size 2 "
                       "--pipeline-model-parallel-size 2").settings
    assert settings["num_samples"] == {"train": 10 * 3 * 2, "validation": (10 // 5 + 1) * 1 * 6, "test": 1 * 6}
    assert resolve(f"{NO_BATCH} --micro-batch-size 3 --global-batch-size 48").settings["num_samples"]["train"] == 480
    monkeypatch.setenv("WORLD_SIZE", "6")
    with pytest.raises(ParameterError, match="WORLD_SIZE=6 is not divisible by the model-parallel size 4"):
        resolve(f"{NO_BATCH} --micro-batch-size 3 --tensor-model-parallel-size 4").settings


@pytest.mark.parametrize("extra, world, why", [
    ("--micro-batch-size 2", None, "the world size is not known here"),
    ("", "2", "--micro-batch-size is not given either"),
    ("--micro-batch-size 2", "two", "WORLD_SIZE is 'two'"),
])
def test_without_global_batch_size_or_a_world_size_the_refusal_names_what_gives_it(extra, world, why, monkeypatch):
    if world is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(ParameterError, match=f"--global-batch-size is not given.*{why}.*give --global-batch-size"):
        resolve(f"{NO_BATCH} {extra}").settings


def test_an_argument_read_nowhere_is_named_as_ignored_not_as_unknown_to_megatron():
    with pytest.warns(UserWarning, match=r"ignored, not read here: use-torch-fsdp2; the samples equal Megatron-LM's "
                                         r"only if these arguments do not change them"):
        resolve(f"{RUN} --use-torch-fsdp2")


def test_an_argument_megatron_lm_does_not_have_is_refused():
    """Before, it was one more name in the "ignored" warning; Megatron-LM exits on it."""
    with pytest.raises(ParameterError, match="--some-new-flag is not an argument of Megatron-LM core_v0.19"):
        resolve(f"{RUN} --some-new-flag 3")
