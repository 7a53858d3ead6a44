"""Files and settings that are not what they should be, met with one typed error (issue 25
items 7, 8, 13, 14, 15): never a hang, a traceback, a half-written output or a silent drop."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.sources import provenance
from mmidx_builder.errors import FormatError, MMIdxError
from mmidx_builder.sources.indexed import write_documents

DEADLINE = 120  # seconds a child may take before the test calls it hung


def _pair(folder, name="train", count=40, seed=0):
    rng = np.random.default_rng(seed)
    return write_documents(folder / name, [rng.integers(1, 60_000, n) for n in rng.integers(1, 30, count)],
                           dtype=np.uint16)


def _in_child(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter; a hang fails the test instead of stalling the suite."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {DEADLINE} s: hung")


# --- item 7: a hostile .mmidx-info sidecar ------------------------------------------------------

@pytest.mark.parametrize("kind, found", [("fifo", "FIFO"), ("directory", "directory"),
                                         ("deep", "nested too deeply"), ("huge", "at most")])
def test_a_hostile_sidecar_is_a_format_error_not_a_hang(tmp_path, kind, found):
    folder = tmp_path / "data"
    prefix = _pair(folder)
    sidecar = provenance.sidecar_path(prefix)
    if kind == "fifo":
        os.mkfifo(sidecar)
    elif kind == "directory":
        os.mkdir(sidecar)
    elif kind == "deep":
        with open(sidecar, "w") as f:
            f.write("[" * 200_000 + "]" * 200_000)
    else:
        with open(sidecar, "w") as f:
            f.write('{"mmidx_info": 1, "pad": "' + "x" * (2 << 20) + '"}')
    result = _in_child(f"""
        import mmidx_builder
        from datasets import load_dataset
        from mmidx_builder.errors import FormatError
        try:
            load_dataset({str(folder)!r}, seq_length=8, cache_dir={str(tmp_path / "c")!r}, split="train")
        except FormatError as error:
            print("FormatError:", error)
        """)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "FormatError:" in result.stdout and sidecar in result.stdout and found in result.stdout


# --- item 8: `mmidx card` / `mmidx upload --dry-run` over a broken README ----------------------

BROKEN_FRONT_MATTER = {
    "invalid YAML": (b"---\nconfigs: [unclosed\n---\nhand-written\n", "front matter"),
    "a !!python tag": (b"---\nx: !!python/object/apply:os.system ['echo PWNED']\n---\nbody\n", "front matter"),
    "a list, not a mapping": (b"---\n- a\n- b\n---\nbody\n", "front matter"),
    "a scalar": (b"---\n5\n---\nbody\n", "front matter"),
    "not UTF-8": (b"---\nlicense: \xff\xfe\n---\nbody\n", "not UTF-8"),
    "configs: 5": (b"---\nconfigs: 5\n---\nbody\n", "front matter"),
    "configs of numbers": (b"---\nconfigs: [1, 2]\n---\nbody\n", "front matter"),
    "features: 5": (b"---\nconfigs:\n- config_name: default\n  features: 5\n---\nbody\n",
                    "configs[0] (config_name 'default') features: expected datasets' YAML features"),
    "a broken settings comment": (b"---\nlicense: mit\n---\n<!-- mmidx card settings: {not json} -->\n",
                                  "settings"),
    "a settings comment of wrong types": (
        b'---\nlicense: mit\n---\n<!-- mmidx card settings: {"seq_length": "x"} -->\n', '"seq_length": "x"'),
}


# The command as a user runs it, a child process each, for these cases; the others call the
# same main() in this process (a child's interpreter start was ~3 s of each case's ~3.5 s).
IN_A_CHILD = {"a !!python tag", "not UTF-8"}


@pytest.mark.parametrize("case", sorted(BROKEN_FRONT_MATTER))
@pytest.mark.parametrize("command", ["card", "upload"])
def test_a_broken_readme_is_one_line_not_a_traceback(tmp_path, case, command, monkeypatch, capsys):
    readme, said = BROKEN_FRONT_MATTER[case]
    _pair(tmp_path)
    (tmp_path / "README.md").write_bytes(readme)
    argv = ["card", str(tmp_path), "--seq-length", "8"] if command == "card" else \
        ["upload", str(tmp_path), "--repo-id", "me/tokens", "--dry-run", "--seq-length", "8"]
    if case in IN_A_CHILD:
        result = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", *argv], capture_output=True, text=True,
                                timeout=DEADLINE, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        returncode, stdout, stderr = result.returncode, result.stdout, result.stderr
    else:
        from mmidx_builder.cli import main

        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        returncode = main(argv)  # an exception out of main is what a traceback would have been
        stdout, stderr = capsys.readouterr()
    assert "Traceback" not in stderr, stderr[-2000:]
    output = stdout + stderr
    assert "README.md" in output and said in output
    assert "PWNED" not in stdout.replace("echo PWNED", "")
    assert (tmp_path / "README.md").read_bytes() == readme  # nothing rewritten
    assert returncode == 1
    if command == "upload":
        assert "an upload would stop" in output


@pytest.mark.parametrize("setting, value", [("add_extra_token", "'no'"), ("add_extra_token", "'false'"),
                                            ("document_structure", "1"), ("seq_length", "'8'"),
                                            ("num_shards", "[1]"), ("seed", "1.5"), ("dtype", "5")])
def test_a_card_setting_of_the_wrong_type_is_a_parameter_error(tmp_path, setting, value):
    from mmidx_builder.errors import ParameterError

    _pair(tmp_path / "data")
    (tmp_path / "data" / "README.md").write_text(
        f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: train.bin\n"
        f"  seq_length: 8\n  {setting}: {value}\n---\n")
    with pytest.raises(ParameterError, match=setting):
        load_dataset(str(tmp_path / "data"), cache_dir=str(tmp_path / "c"), split="train")


# Cards datasets itself cannot read (it parses `configs:` and `dataset_info:` before it picks a
# builder): one ParameterError naming the card, the config, the setting, expected and found.
CONFIG = "configs:\n- config_name: default\n  data_files: train.bin\n  seq_length: 8\n"
FEATURES = r"features: expected datasets' YAML features \(a list of mappings with a name and a dtype\), found"
UNREADABLE_CARDS = {  # front matter, what the error says after the card's name
    "features: 5": (CONFIG + "  features: 5\n", rf"configs\[0\] \(config_name 'default'\) {FEATURES} int 5$"),
    "features of numbers": (CONFIG + "  features: [1, 2]\n",
                            rf"configs\[0\] \(config_name 'default'\) {FEATURES} list \[1, 2\]"),
    "a feature of a number": (CONFIG + "  features: {input_ids: 5}\n",
                              rf"configs\[0\] \(config_name 'default'\) {FEATURES} dict \{{'input_ids': 5\}}"),
    "config_name: 5": (CONFIG.replace("default", "5"), r"configs\[0\] config_name: expected a string, found int 5$"),
    "dataset_info features: 5": (CONFIG + "dataset_info:\n  features: 5\n", rf"dataset_info {FEATURES} int 5$"),
    "configs: 5": ("configs: 5\n", r"configs: expected a list of configs \(mappings with a config_name\), found int 5$"),
}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("case", sorted(UNREADABLE_CARDS))
def test_a_card_datasets_cannot_read_is_a_parameter_error_naming_the_card(tmp_path, case, streaming):
    from mmidx_builder.errors import ParameterError

    _pair(tmp_path / "data")
    (tmp_path / "data" / "README.md").write_text("---\n" + UNREADABLE_CARDS[case][0] + "---\n")
    readme = str(tmp_path / "data" / "README.md")
    with pytest.raises(ParameterError) as error:
        load_dataset(str(tmp_path / "data"), cache_dir=str(tmp_path / "c"), split="train", streaming=streaming)
    said = str(error.value)
    assert said.startswith(f"{readme}: the dataset card's front matter: "), said
    assert re.search(UNREADABLE_CARDS[case][1], said), said


# --- item 13: a card for names with glob characters -------------------------------------------

def test_a_card_for_a_name_with_glob_characters_loads(tmp_path):
    from mmidx_builder.publishing.card import CardSettings, write_card

    prefix = _pair(tmp_path / "data", name="glob[1]*?_text_document")
    write_card(tmp_path / "data", CardSettings(seq_length=8))
    from_card = load_dataset(str(tmp_path / "data"), cache_dir=str(tmp_path / "c"), split="train")
    direct = load_dataset("mmidx", data_files={"train": [prefix.replace("[", "[[]").replace("*", "[*]")
                                                         .replace("?", "[?]") + ".bin"]},
                          seq_length=8, cache_dir=str(tmp_path / "c"), split="train")
    assert len(from_card) > 0 and from_card["input_ids"] == direct["input_ids"]


# --- item 15: a pair that falls in no split -------------------------------------------------------

def test_a_root_pair_beside_a_valid_folder_is_refused_not_dropped(tmp_path):
    from mmidx_builder.errors import ParameterError
    from mmidx_builder.publishing.hub import plan_upload

    _pair(tmp_path, name="tokens")
    _pair(tmp_path / "valid", name="tokens", seed=1)
    from mmidx_builder.publishing.card import render_card

    with pytest.raises(ParameterError, match=r"1 \.bin file\(s\) fall in no split \(tokens\.bin\)"):
        render_card(tmp_path)
    plan = plan_upload(tmp_path, "me/tokens")
    assert len(plan.pairs) == 2 and "tokens.bin" in plan.card_problem and "would stop" in plan.describe()


# --- item 14: upload(..., api=HfApi(token=T)) uploads with T -----------------------------------

def test_upload_uses_the_token_of_the_api_it_is_given(tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from hub_server import LocalHub, isolate_hf_home, point_clients_at

    from mmidx_builder.publishing import hub
    from mmidx_builder.publishing.card import CardSettings

    token = "hf_apiTOKENgivenToHfApiOnly0123456789"
    folder = tmp_path / "tokens"
    _pair(folder)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    isolate_hf_home(monkeypatch, tmp_path / "hf_home")  # no stored token either
    with LocalHub(token=token) as server:
        point_clients_at(monkeypatch, server.url)
        hub.upload(folder, "me/private", private=True, settings=CardSettings(seq_length=8),
                   api=HfApi(endpoint=server.url, token=token), echo=lambda line: None)
        assert set(server.files("me/private")) >= {"train.bin", "train.idx", "README.md"}
        sent = {r["authorization"] for r in server.requests if r["path"] != "/api/agent-harnesses"}
        assert sent == {f"Bearer {token}"}


# --- item 15: a read-only folder: the dry run says the upload would stop, the upload writes nothing

@contextlib.contextmanager
def _read_only(folder):
    """``folder`` made read-only for this user: ``chmod 555``, or for root (who writes there
    anyway) the immutable attribute."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        undo = ["chmod", "755", str(folder)]
    else:
        made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"running as root and chattr +i is not available here: {made.stderr.strip()}")
        undo = ["chattr", "-i", str(folder)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


def test_a_read_only_folder_is_a_problem_of_the_dry_run_and_stops_the_upload(tmp_path, monkeypatch):
    from mmidx_builder.publishing import hub
    from mmidx_builder.publishing.card import CardSettings
    from mmidx_builder.errors import HubError

    monkeypatch.setenv("HF_TOKEN", "hf_aTokenSoThatOnlyTheFolderStopsIt0")  # no request is made
    folder = tmp_path / "shared"
    _pair(folder)
    lines = []
    stop = "the dataset card cannot be made, nothing was uploaded.*not writable"
    with _read_only(folder):
        # The dry run prints its plan, then fails as the upload does, with the same error.
        with pytest.raises(HubError, match=stop):
            hub.upload(folder, "me/tokens", dry_run=True, settings=CardSettings(seq_length=8), echo=lines.append)
        with pytest.raises(HubError, match=stop):
            hub.upload(folder, "me/tokens", settings=CardSettings(seq_length=8), echo=lines.append)
    assert "an upload would stop" in lines[0] and "not writable" in lines[0]
    assert sorted(os.listdir(folder)) == ["train.bin", "train.idx"]


def test_a_dry_run_that_finds_the_upload_would_stop_exits_non_zero_as_the_upload_does(tmp_path, monkeypatch):
    """hub_upload.py and `mmidx upload`, dry and real, in a child process each: a dry run that
    finds the upload would stop over the folder or its card exits 1 with the upload's own error."""
    repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = tmp_path / "shared"
    _pair(folder)

    def run(*command, token=True):
        env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE")}
        env.update(HF_HOME=str(tmp_path / "hf-home"), HF_HUB_OFFLINE="1")  # no stored token; a real upload fails offline
        if token:
            env["HF_TOKEN"] = "hf_aTokenSoThatOnlyTheFolderStopsIt0"
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, cwd=repository,
                              timeout=DEADLINE)
        return done.returncode, done.stderr.strip().splitlines()[-1:]

    # hub_upload.py is `mmidx upload` (its main): its exit codes are checked on the first cases only.
    hub_upload = [os.path.join(repository, "hub_upload.py")]
    cli = ["-m", "mmidx_builder.cli", "upload"]
    for command in (hub_upload, cli):
        base = [*command, str(folder), "--repo-id", "me/tokens"]
        assert run(*base, "--dry-run", "--seq-length", "8")[0] == 0  # nothing stops it
        code, error = run(*base, "--dry-run")  # the default seq_length 2048 is longer than the split
        assert code == 1 and "the dataset card cannot be made, nothing was uploaded" in error[0], error
        if command is hub_upload:
            continue
        assert run(*base) == (1, error)  # the upload stops with the very same line
        # No token: the dry run says so and passes (the documented way is a dry run, then
        # `hf auth login`); the upload stops.
        assert run(*base, "--dry-run", "--seq-length", "8", token=False)[0] == 0
        code, error = run(*base, "--seq-length", "8", token=False)
        assert code == 1 and "not logged in" in error[0], error
        with _read_only(folder):
            code, error = run(*base, "--dry-run", "--seq-length", "8")
            assert code == 1 and "nothing was uploaded" in error[0] and "not writable" in error[0], error
            assert run(*base, "--seq-length", "8") == (1, error)
    assert sorted(os.listdir(folder)) == ["train.bin", "train.idx"]


# --- item 15: the small ones ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["fifo", "directory"])
@pytest.mark.parametrize("which", [".bin", ".idx"])
def test_a_pair_file_that_is_a_fifo_or_a_directory_is_named_as_such(tmp_path, kind, which):
    from mmidx_builder.sources.indexed import IndexedFile

    prefix = _pair(tmp_path)
    os.remove(prefix + which)
    os.mkfifo(prefix + which) if kind == "fifo" else os.mkdir(prefix + which)
    with pytest.raises(FormatError, match=f"{prefix}{which}: file: expected a regular file.*found a "
                                          f"{'FIFO' if kind == 'fifo' else 'directory'}"):
        IndexedFile.open(prefix)


@pytest.mark.parametrize("value", [-1, -1000])
def test_a_negative_max_document_chars_is_refused(tmp_path, value):
    (tmp_path / "a.jsonl").write_text('{"text": "short"}\n')
    result = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "convert", str(tmp_path / "a.jsonl"),
                             "--output-prefix", str(tmp_path / "out"), "--tokenizer", "bytes",
                             "--max-document-chars", str(value)], capture_output=True, text=True, timeout=DEADLINE)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--max-document-chars" in result.stderr and str(value) in result.stderr
    assert not list(tmp_path.glob("out*"))


@pytest.mark.parametrize("name_bytes", [237, 244, 251, 255])
def test_names_up_to_the_file_system_limit_can_be_written_and_loaded(tmp_path, name_bytes):
    from mmidx_builder.publishing.card import CardSettings, write_card

    stem = "é" * ((name_bytes - 4) // 2) + "x" * ((name_bytes - 4) % 2)  # two bytes a character: cuts meet one
    assert len(os.fsencode(stem + ".bin")) == name_bytes
    prefix = _pair(tmp_path / "data", name=stem)
    write_card(tmp_path / "data", CardSettings(seq_length=8))
    loaded = load_dataset(str(tmp_path / "data"), cache_dir=str(tmp_path / "c"), split="train")
    assert len(loaded) > 0 and os.path.exists(prefix + ".idx")
    assert sorted(p for p in os.listdir(tmp_path / "data") if p.startswith(".")) == []


def test_save_indices_on_a_full_disk_leaves_none_of_its_files(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, as a full disk: writes past it fail) that the small
    arrays fit in and the shuffle index does not."""
    prefix = _pair(tmp_path / "data", count=400)
    out = tmp_path / "indices"
    result = _in_child(f"""
        import resource, signal, sys
        from mmidx_builder.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))  # document_index.npy fits
        sys.exit(main(["samples", {prefix!r}, "--seq-length", "2", "--num-epochs", "3",
                       "--save-indices", {str(out)!r}]))
        """)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert (f"{out}: not enough space for the sampling indices (none was written): a write failed (a short write, "
            ) in result.stderr and " written) on the way to about " in result.stderr, result.stderr
    assert os.listdir(out) == []
    # and the same call without the limit writes all four
    assert subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "samples", prefix, "--seq-length", "2",
                           "--num-epochs", "3", "--save-indices", str(out)], capture_output=True).returncode == 0
    assert sorted(os.listdir(out)) == ["document_index.npy", "meta.json", "sample_index.npy", "shuffle_index.npy"]
