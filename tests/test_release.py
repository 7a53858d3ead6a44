"""What a packager checks: one version, `mmidx --version`, a changelog entry and the license, an
sdist that holds what its tests need and whose tests run from it."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import mmidx_builder
from mmidx_builder.cli import main

ROOT = Path(__file__).resolve().parent.parent
# Tracked files the sdist leaves out: CI's own script, git's ignore list.
NOT_IN_SDIST = (".ci/", ".gitignore")
# What setuptools adds to an sdist.
GENERATED = ("PKG-INFO", "setup.cfg", "mmidx_builder.egg-info/")


def _pyproject_version() -> str:
    (version,) = re.findall(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    return version


def test_the_version_is_written_once_and_read_from_the_metadata(capsys):
    installed = importlib.metadata.version("mmidx-builder")
    assert mmidx_builder.__version__ == installed
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"mmidx {installed} (datasets {importlib.metadata.version('datasets')}, Python ")
    sources = [p for p in (ROOT / "mmidx_builder").rglob("*.py") if re.search(r"__version__\s*=\s*['\"]", p.read_text())]
    assert not sources, f"a version written in the source besides pyproject.toml: {sources}"


def test_the_console_script_prints_it():
    mmidx = Path(sys.executable).with_name("mmidx")
    if not mmidx.exists():
        pytest.skip(f"no mmidx console script beside {sys.executable} (the package is not installed there)")
    result = subprocess.run([str(mmidx), "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("mmidx "), result


def test_the_changelog_has_an_entry_for_this_version_and_the_license_is_apache():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(_pyproject_version())}\b", changelog, flags=re.M), \
        f"CHANGELOG.md has no '## {_pyproject_version()}' section"
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()


def test_the_changelog_s_top_entry_is_the_version_the_package_reports():
    """Issue 40 item 5: what changed since the last release is the version pyproject.toml (and
    so `mmidx --version`) gives, never an 'Unreleased' section above it while the package
    still calls itself the release before (0.1.0 beside a changelog of round 4's changes)."""
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    version = _pyproject_version()
    assert headings and re.fullmatch(rf"{re.escape(version)}( \(\d{{4}}-\d{{2}}-\d{{2}}\))?", headings[0]), \
        f"CHANGELOG.md's top section is {headings[:1]}, not '## {version} (YYYY-MM-DD)' (pyproject.toml's version)"
    assert len(set(headings)) == len(headings), headings
    installed = importlib.metadata.distribution("mmidx-builder")
    source = (installed.read_text("direct_url.json") or "")
    if f'"file://{ROOT.as_posix()}"' in source.replace(" ", ""):  # this checkout, installed editable
        assert installed.version == version, (f"the installed metadata says {installed.version}, pyproject.toml "
                                              f"{version}: pip install -e . again to report the new version")


def _tracked_files() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (e.g. the tests run from the sdist): no list of tracked files to compare")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name and (ROOT / name).exists()]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """The sdist built from a copy of the tracked files (so that the checkout gets no build
    files), unpacked: the folder a packager runs the tests from."""
    setuptools = pytest.importorskip("setuptools", reason="the test extra's setuptools builds the sdist")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__} cannot build this pyproject (>=77, the test extra)")
    work = tmp_path_factory.mktemp("sdist")
    source = work / "source"
    for name in _tracked_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    build = ("import sys; from setuptools import build_meta; "
             "print(build_meta.build_sdist(sys.argv[1]))")
    result = subprocess.run([sys.executable, "-c", build, str(work / "dist")], cwd=source, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    archive = work / "dist" / result.stdout.strip().splitlines()[-1]
    with tarfile.open(archive) as tar:
        tar.extractall(work / "unpacked", filter="data") if sys.version_info >= (3, 12) else tar.extractall(work / "unpacked")
    (unpacked,) = (work / "unpacked").iterdir()
    return unpacked


def test_the_sdist_holds_every_tracked_file_but_ci(sdist):
    shipped = {str(p.relative_to(sdist)) for p in sdist.rglob("*") if p.is_file()}
    expected = {name for name in _tracked_files() if not name.startswith(NOT_IN_SDIST)}
    assert sorted(expected - shipped) == []
    extra = {name for name in shipped - expected if not name.startswith(GENERATED)}
    assert sorted(extra) == []
    assert {"LICENSE", "CHANGELOG.md", "hub_upload.py", "docs/testing.md", "tests/conftest.py"} <= shipped


def test_the_tests_run_from_the_sdist(sdist):
    """Collected whole (every helper module the tests import is there), and the tests that read
    docs/, README.md and hub_upload.py pass from the unpacked folder."""
    env = {**os.environ, "PYTHONPATH": str(sdist), "HF_HUB_OFFLINE": "1"}
    env.pop("MMIDX_REQUIRE_ORACLE", None)  # the oracles are this checkout's, not the sdist's
    collected = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co", "tests"],
                               cwd=sdist, env=env, capture_output=True, text=True)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_docs.py", "tests/test_release.py",
                          "-k", "README or publishing or few_are_skipped or version or changelog"],
                         cwd=sdist, env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert " passed" in ran.stdout.splitlines()[-1]
