"""Library messages in a command's own words: ``workers=`` becomes ``--workers``.

The library names the keyword argument a message is about (``workers= must be at least 1``,
``pass overwrite=True``, ``more than max_document_chars=1,000``), since its callers pass
keywords. A command whose options have the keywords' names as destinations reports the same
message with its flags: ``--workers must be at least 1``, ``pass --overwrite``, ``more than
--max-document-chars 1,000``. Only the library's own forms are rewritten: a keyword after a
space, an opening bracket or the start, followed by nothing, ``True``, a number or a quoted
word; so a path such as ``data/lang=en/a.jsonl`` is left as it is.
"""

from __future__ import annotations

import argparse
import re
from typing import Callable


def keyword_flags(parser: argparse.ArgumentParser) -> dict[str, tuple[str, bool]]:
    """``{keyword: (flag, takes no value)}`` for every option of ``parser``."""
    # argparse keeps its actions in a private list; it has no public accessor.
    return {action.dest: (max(action.option_strings, key=len), action.nargs == 0)
            for action in parser._actions if action.option_strings and action.dest != argparse.SUPPRESS}


def in_flags(parser: argparse.ArgumentParser) -> Callable[[str], str]:
    """A function rewriting a library message with ``parser``'s flags (see the module)."""
    flags = keyword_flags(parser)
    if not flags:
        return str
    names = "|".join(sorted(map(re.escape, flags), key=len, reverse=True))
    pattern = re.compile(rf"(?<![^\s(\[])({names})=(True\b|'[^'\s]*'|-?\d[\d,._]*|)(?=[\s,;:.)\]]|$)")

    def rewrite(match: re.Match) -> str:
        flag, takes_no_value = flags[match.group(1)]
        value = match.group(2)
        if not value or (value == "True" and takes_no_value):
            return flag
        return f"{flag} {value.strip(chr(39))}"

    return lambda message: pattern.sub(rewrite, str(message))


__all__ = ["in_flags", "keyword_flags"]
