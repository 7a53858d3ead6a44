"""The progress bar of a conversion: documents, with tokens/s and input MB/s beside them."""

from __future__ import annotations

import time

from ..progress import bar
from ..progress import enabled as progress_bars_enabled
from .summary import ConvertSummary


class Meter:
    """A tqdm bar of documents, with tokens/s and input MB/s beside it (nothing when disabled,
    or when the user turned progress bars off: mmidx_builder/progress.py)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and progress_bars_enabled()
        self.bar = None
        self.shown = 0
        self.refreshed = 0.0

    def __enter__(self):
        if self.enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(unit=" docs", desc="convert", dynamic_ncols=True)
        return self

    def update(self, summary: ConvertSummary, started: float) -> None:
        if self.bar is None:
            return
        self.bar.update(summary.documents - self.shown)
        self.shown = summary.documents
        now = time.perf_counter()
        if now - self.refreshed > 0.5:
            self.refreshed = now
            seconds = max(now - started, 1e-9)
            self.bar.set_postfix_str(f"{sum(summary.tokens.values()) / seconds:,.0f} tok/s, "
                                     f"{summary.input_bytes / 1e6 / seconds:,.1f} MB/s", refresh=False)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()


def count_bar(shown: bool, **tqdm_options):
    """A bar of ``tqdm_options`` (``total``, ``unit``, ``desc``) when ``shown`` (``progress=``)
    and progress bars are on; else a bar that shows nothing."""
    if shown:
        return bar(dynamic_ncols=True, **tqdm_options)
    return _NoBar()


class _NoBar:
    """What a bar that shows nothing needs to answer (tqdm itself takes 0.1 s to import)."""

    def update(self, count: int = 1) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


__all__ = ["Meter", "count_bar"]
