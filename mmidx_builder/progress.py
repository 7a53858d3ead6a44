"""Progress bars for long work (index builds, ``mmidx convert``, Hub uploads), and the one
answer to "has the user turned progress bars off?".

Off when the user said so in either library's way, as ``datasets`` shows its own bars:

    datasets          datasets.disable_progress_bars()    HF_DATASETS_DISABLE_PROGRESS_BARS=1
    huggingface_hub   huggingface_hub.utils.disable_progress_bars()    HF_HUB_DISABLE_PROGRESS_BARS=1

Neither library is imported to ask (``import datasets`` takes ~2 s): a library not yet
imported cannot have been switched off but by its environment variable. tqdm's own
``TQDM_DISABLE=1`` works as well, as for any tqdm bar.

A build of indices is a few numpy calls, each of which may run for minutes on a large corpus,
with nothing to count in between. :class:`Steps` shows such a job as one bar of named steps
("data/a_text_document: shuffle  2/3 [00:41]") that appears only once the job has run for
``delay`` seconds (quick jobs print nothing) and whose clock ticks while a step runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

# datasets.config.ENV_VARS_TRUE_VALUES; huggingface_hub reads its variable the same way.
_TRUE = {"1", "ON", "YES", "TRUE"}
_SWITCHES = (("datasets.utils.tqdm", "HF_DATASETS_DISABLE_PROGRESS_BARS"),
             ("huggingface_hub.utils.tqdm", "HF_HUB_DISABLE_PROGRESS_BARS"))


def enabled() -> bool:
    """False when the user turned progress bars off (see the module docstring)."""
    for module_name, variable in _SWITCHES:
        module = sys.modules.get(module_name)
        if module is not None:
            if module.are_progress_bars_disabled():
                return False
        elif os.environ.get(variable, "").upper() in _TRUE:
            return False
    return True


def bar(**tqdm_options):
    """A ``tqdm.auto.tqdm`` that is disabled when progress bars are off."""
    from tqdm.auto import tqdm

    return tqdm(disable=not enabled(), **tqdm_options)


@contextlib.contextmanager
def hub_bars_follow_the_switch():
    """huggingface_hub's bars (an upload's) stay off for the block when ours are off, so that
    datasets' switch quiets the Hub transfers we start as well; restored after."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    turn_off = not enabled() and not are_progress_bars_disabled()
    if turn_off:
        disable_progress_bars()
    try:
        yield
    finally:
        if turn_off:
            enable_progress_bars()


class Steps:
    """A job of named steps as one progress bar, shown once the job has run ``delay`` seconds::

        with Steps("data/a_text_document", ("documents", "samples", "shuffle")) as steps:
            steps.step("documents"); ...
            steps.step("samples"); ...

    Nothing is printed (and no thread started) when progress bars are off."""

    DELAY_SECONDS = 2.0  # "longer than a couple of seconds"
    TICK_SECONDS = 1.0

    def __init__(self, label: str, steps: tuple[str, ...], delay: float | None = None):
        self.label, self.steps = label, tuple(steps)
        self.delay = self.DELAY_SECONDS if delay is None else delay
        self.current, self.done = None, 0
        self.bar = None
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._ticker = None

    def __enter__(self):
        if enabled():
            self._started = time.monotonic()
            self._ticker = threading.Thread(target=self._tick, name="mmidx-progress", daemon=True)
            self._ticker.start()
        return self

    def step(self, name: str) -> None:
        """Starts step ``name`` (one of ``steps``); the previous one is done."""
        with self._lock:
            if self.current is not None:
                self.done += 1
            self.current = name
            if self.bar is not None:
                self._show()

    def _show(self) -> None:
        self.bar.set_description_str(f"{self.label}: {self.current}", refresh=False)
        self.bar.n = self.done
        self.bar.refresh()

    def _tick(self) -> None:
        if self._finished.wait(self.delay):
            return
        from tqdm.auto import tqdm

        with self._lock:
            if self._finished.is_set():
                return
            self.bar = tqdm(total=len(self.steps), initial=self.done, desc=f"{self.label}: {self.current}",
                            unit="step", dynamic_ncols=True, bar_format="{desc} {n_fmt}/{total_fmt} [{elapsed}]")
            self.bar.start_t -= time.monotonic() - self._started  # the clock counts from the job's start
        while not self._finished.wait(self.TICK_SECONDS):
            with self._lock:
                self.bar.refresh()  # the clock moves while a long numpy call runs

    def __exit__(self, *exc) -> None:
        self._finished.set()
        if self._ticker is not None:
            self._ticker.join()
        if self.bar is not None:
            self.bar.n = self.done + (exc[0] is None and self.current is not None)
            self.bar.close()


__all__ = ["Steps", "bar", "enabled", "hub_bars_follow_the_switch"]
