"""Bounds on a dataset card's front matter, checked before anything parses it into objects.

A README's YAML is parsed by huggingface_hub (``yaml.safe_load``, whose composer recurses: a
value nested 5,000 deep is a bare ``RecursionError``) and then walked by datasets; neither
bounds the time it takes (1 MB of front matter took 37 s, 20 MB 227 s; 10,000 configs 164 s).
Here the front matter is first streamed through YAML's event parser (a state machine: no
recursion, libyaml's when installed), which measures what needs a bound, and a card past
one is a one-line :class:`ParameterError` naming the README, the limit and how to raise it:

    MMIDX_MAX_CARD_BYTES    front matter size            (default 1 MiB)
    MMIDX_MAX_CARD_DEPTH    nesting of lists and mappings (default 64)
    MMIDX_MAX_CARD_CONFIGS  entries of ``configs:``       (default 1,000)
    MMIDX_MAX_DATA_FILES    files the data_files patterns (a card's, a call's or a folder's) of
                            one load match (default 50,000; checked by hf/registry.py)

The same check runs for ``load_dataset`` (hf/registry.py, inside our module factories) and
for ``mmidx card`` / ``mmidx upload`` (publishing/card.py), on the README they read and on the
card they would write: a card within the bounds may not be rewritten past them (its YAML
aliases written out in full, our own fields added).
"""

from __future__ import annotations

import os
import re

from ..errors import ParameterError

LIMITS = {  # environment variable -> (default, what it bounds)
    "MMIDX_MAX_CARD_BYTES": (1 << 20, "bytes of front matter"),
    "MMIDX_MAX_CARD_DEPTH": (64, "levels of nesting"),
    "MMIDX_MAX_CARD_CONFIGS": (1_000, "configs"),
    "MMIDX_MAX_DATA_FILES": (50_000, "files matched by the data_files patterns of one load"),
}
# huggingface_hub's own pattern for the front matter block (repocard.REGEX_YAML_BLOCK).
_FRONT_MATTER = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")


def limit(name: str) -> int:
    """The limit ``name`` of LIMITS: its environment variable when set, else the default."""
    default, _ = LIMITS[name]
    given = os.environ.get(name)
    if given is None:
        return default
    try:
        value = int(given)
    except ValueError:
        raise ParameterError(f"{name}={given!r}: expected a whole number") from None
    if value < 1:
        raise ParameterError(f"{name}={given!r}: expected a whole number >= 1")
    return value


def too_many_files(count: int) -> ParameterError | None:
    """The error for a load whose patterns matched ``count`` files, past MMIDX_MAX_DATA_FILES."""
    if count <= limit("MMIDX_MAX_DATA_FILES"):
        return None
    return ParameterError(f"the data_files patterns match {count:,} files, more than the limit of "
                          f"{limit('MMIDX_MAX_DATA_FILES'):,} files of one load; narrow the pattern (a card's "
                          "data_files, data_files= or the folder) or set MMIDX_MAX_DATA_FILES to raise the limit")


def _over(where: str, name: str, found: str) -> ParameterError:
    value, what = limit(name), LIMITS[name][1]
    return ParameterError(f"{where}: the front matter holds {found}, more than the limit of {value:,} {what}; "
                          f"a card this large is refused before it is parsed (set {name} to raise the limit)")


def check_front_matter(text: str, where: str) -> None:
    """Refuses the card ``text`` (named ``where`` in messages) when its front matter is past a
    bound, is not valid YAML, or is not a mapping; returns at once for a card without any."""
    import yaml

    found = _FRONT_MATTER.search(text)
    if not found:
        return
    front = found.group(2)
    size = len(front.encode("utf-8"))
    if size > limit("MMIDX_MAX_CARD_BYTES"):
        raise _over(where, "MMIDX_MAX_CARD_BYTES", f"{size:,} bytes")
    max_depth, max_configs = limit("MMIDX_MAX_CARD_DEPTH"), limit("MMIDX_MAX_CARD_CONFIGS")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth, top_key, expecting_key, configs, in_configs = 0, None, False, 0, False
    try:
        for event in yaml.parse(front, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                if depth == 0 and not isinstance(event, yaml.MappingStartEvent):
                    raise ParameterError(f"{where}: the front matter (the YAML between the '---' lines) must be a "
                                         "mapping of fields, found a list")
                if in_configs and depth == 2:
                    configs += 1
                    if configs > max_configs:
                        raise _over(where, "MMIDX_MAX_CARD_CONFIGS", f"more than {max_configs:,} configs")
                depth += 1
                if depth > max_depth:
                    raise _over(where, "MMIDX_MAX_CARD_DEPTH", f"a value nested more than {max_depth} deep "
                                f"(in field {top_key!r})")
                expecting_key = isinstance(event, yaml.MappingStartEvent) and depth == 1
                continue
            if isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                if depth == 1:
                    expecting_key, in_configs = True, False
                continue
            if depth == 0 and isinstance(event, yaml.ScalarEvent):
                raise ParameterError(f"{where}: the front matter (the YAML between the '---' lines) must be a "
                                     f"mapping of fields, found the text {event.value[:40]!r}")
            if depth == 1 and isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                if expecting_key:
                    top_key = getattr(event, "value", None)
                    in_configs = top_key == "configs"
                expecting_key = not expecting_key
    except yaml.YAMLError as error:
        why = " ".join(str(error).split())[:200]
        raise ParameterError(f"{where}: the front matter (the YAML between the '---' lines) is not valid YAML: "
                             f"{why}") from None


def count_aliases(text: str) -> int:
    """The YAML aliases (``*name``) in the card ``text``'s front matter: each is written out in
    full when the front matter is parsed and dumped again."""
    import yaml

    found = _FRONT_MATTER.search(text)
    if not found:
        return 0
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(found.group(2), Loader=loader))
    except yaml.YAMLError:
        return 0


__all__ = ["LIMITS", "check_front_matter", "count_aliases", "limit", "too_many_files"]
