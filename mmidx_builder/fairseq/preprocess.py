"""``fairseq-preprocess`` of our own: parallel text files to dictionaries and a data-bin,
byte for byte what fairseq 0.12's ``fairseq-preprocess`` (``--dataset-impl mmap``) writes.

    {trainpref}.{src}  {trainpref}.{tgt}     text, one sentence a line (UTF-8)
      -> dict.{src}.txt  dict.{tgt}.txt      built from the training text (or --srcdict/--tgtdict)
      -> {split}.{src}-{tgt}.{lang}.bin/.idx train, valid, valid1..., test, test1...

A line is split on whitespace (fairseq's ``tokenize_line``: Unicode whitespace, as
``str.split()``), its words numbered with the dictionary (unknown ones ``<unk>``) and
``</s>`` appended. Lines end at ``\\n``, ``\\r\\n`` or ``\\r``, as Python's text mode reads
them (so a U+2028 or a form feed is whitespace inside a line, not a line end). Token dtype:
fairseq's ``best_fitting_int_dtype`` of the dictionary size.

A dictionary is fairseq's ``build_dictionary``: every word of the training text counted
(``</s>`` once a line), then ``Dictionary.finalize(threshold, nwords, padding_factor)``.

Everything is written into a hidden folder inside ``destdir`` and moved into place at the
end, so a failure (bad UTF-8 in the test text, a full disk) leaves nothing half-written.
fairseq's ``preprocess.log`` is not written. This module never imports ``datasets`` or torch.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from ..storage.files import temporary_path
from ..checks import check_int
from ..dtypes import Flavour, writer_dtype
from ..errors import ConvertError, ParameterError
from .pairs import Dictionary, dictionary_path
from ..sources.indexed import IndexedFileWriter

# Bytes of text a worker takes at a time; a chunk ends at a line end.
CHUNK_BYTES = 4 << 20


@dataclass
class BinarizedFile:
    """One written ``.bin``/``.idx`` pair and what fairseq logs for it."""

    split: str
    lang: str
    text: str
    prefix: str
    sentences: int = 0
    tokens: int = 0
    replaced: int = 0   # words not in the dictionary, written as <unk>

    @property
    def replaced_percent(self) -> float:
        return 100 * self.replaced / self.tokens if self.tokens else 0.0


@dataclass
class PreprocessSummary:
    destdir: str
    dictionaries: dict[str, tuple[str, int]] = field(default_factory=dict)  # lang -> (path, symbols)
    files: list[BinarizedFile] = field(default_factory=list)

    def table(self) -> str:
        lines = [f"{'dictionary':<24} {'symbols':>9}"]
        lines += [f"{os.path.basename(path):<24} {size:>9,}" for path, size in self.dictionaries.values()]
        if self.files:
            lines += ["", f"{'file':<32} {'sentences':>10} {'tokens':>12} {'<unk>':>8}"]
            lines += [f"{os.path.basename(f.prefix) + '.bin':<32} {f.sentences:>10,} {f.tokens:>12,} "
                      f"{f.replaced_percent:>7.3g}%" for f in self.files]
        lines.append(f"wrote {self.destdir}")
        return "\n".join(lines)


# --- reading text as fairseq does ---------------------------------------------------------

def _line_end_cut(buffer: bytes, at_eof: bool) -> int:
    """Where to cut ``buffer`` so that the first part ends at a line end (0: nowhere yet).

    After ``\\n`` is always a line end; after ``\\r`` only when the next byte is known not
    to be ``\\n``. Neither byte occurs inside a UTF-8 multi-byte character."""
    if at_eof:
        return len(buffer)
    newline = buffer.rfind(b"\n")
    carriage = buffer.rfind(b"\r", 0, len(buffer) - 1)
    if carriage > newline and buffer[carriage + 1:carriage + 2] != b"\n":
        return carriage + 1
    return newline + 1


def text_chunks(path: str, chunk_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, bytes)`` of ``path`` in pieces of about ``chunk_bytes`` (default
    :data:`CHUNK_BYTES`) that end at line ends, so each decodes into whole lines alone."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    offset = 0
    pending = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk_bytes)
            buffer = pending + block
            cut = _line_end_cut(buffer, at_eof=not block)
            if cut:
                yield offset, buffer[:cut]
                offset += cut
            pending = buffer[cut:]
            if not block:
                return


def decode_text(path: str, offset: int, data: bytes) -> str:
    """A chunk as Python's text mode reads it: UTF-8, every line end made ``\n``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConvertError(f"{path}: byte {offset + error.start}: expected UTF-8 text, found "
                           f"{data[error.start:error.start + 4]!r} (fairseq-preprocess reads UTF-8)") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def decode_lines(path: str, offset: int, data: bytes) -> list[str]:
    """The lines of a chunk, without their line ends."""
    lines = decode_text(path, offset, data).split("\n")
    if lines[-1] == "":
        lines.pop()   # the text ended with a line end: no empty line after it
    return lines


# What _binarize_chunk numbers with, set in each worker (and in-process for one worker):
# (word -> id, <unk> id, </s> id, dtype).
_WORKER_DICTIONARY: tuple = ()


def _set_dictionary(state: tuple) -> None:
    global _WORKER_DICTIONARY
    _WORKER_DICTIONARY = state


# Line ends are whitespace, so a chunk's words, split at once, are its lines' words in order.

def _count_chunk(job: tuple[str, int, bytes]) -> tuple[Counter, int]:
    text = decode_text(*job)
    lines = text.count("\n") + (not text.endswith("\n"))
    return Counter(text.split()), lines


def _binarize_chunk(job: tuple[str, int, bytes]) -> tuple[np.ndarray, np.ndarray, int]:
    index, unk, eos, dtype = _WORKER_DICTIONARY
    text = decode_text(*job)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    words = np.fromiter((len(line.split()) for line in lines), np.int64, len(lines))
    ids = list(map(index.get, text.split()))   # None: not in the dictionary
    replaced = ids.count(None)
    if replaced:
        ids = [unk if i is None else i for i in ids]
    # Each line's ids, then EOS: word k of line j sits at k + j (j EOS before it).
    tokens = np.full(len(ids) + len(lines), eos, dtype)
    tokens[np.arange(len(ids)) + np.repeat(np.arange(len(lines)), words)] = ids
    return tokens, words + 1, replaced


def _map_chunks(function, paths: Sequence[str], workers: int, state: tuple = ()) -> Iterator:
    """``function`` over every chunk of ``paths``, results in file order, ``workers`` processes."""
    jobs = ((path, offset, data) for path in paths for offset, data in text_chunks(path))
    if workers <= 1:
        _set_dictionary(state)
        yield from map(function, jobs)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with context.Pool(workers, initializer=_set_dictionary, initargs=(state,)) as pool:
        yield from pool.imap(function, jobs)


# --- dictionaries and binary files ----------------------------------------------------------

def build_dictionary(paths: Sequence[str], *, threshold: int = -1, nwords: int = -1, padding_factor: int = 8,
                     workers: int = 1) -> Dictionary:
    """fairseq's ``build_dictionary`` over text files: every word counted, ``</s>`` once a
    line, then :meth:`Dictionary.finalize`."""
    counts: Counter = Counter()
    lines = 0
    for chunk_counts, chunk_lines in _map_chunks(_count_chunk, list(paths), workers):
        counts.update(chunk_counts)
        lines += chunk_lines
    dictionary = Dictionary()
    dictionary.add_symbol(dictionary.eos_word, lines)
    for word, count in sorted(counts.items()):
        dictionary.add_symbol(word, count)
    dictionary.finalize(threshold=threshold, nwords=nwords, padding_factor=padding_factor)
    return dictionary


def binarize(text_path: str, dictionary: Dictionary, prefix: str, *, workers: int = 1) -> BinarizedFile:
    """Writes ``prefix.bin/.idx`` from a text file, as fairseq-preprocess does for one side."""
    dtype = writer_dtype(len(dictionary), Flavour.FAIRSEQ)
    state = (dictionary.indices, dictionary.unk_index, dictionary.eos_index, dtype)
    written = BinarizedFile("", "", text_path, prefix)
    with IndexedFileWriter(prefix, dtype=dtype, flavour=Flavour.FAIRSEQ) as writer:
        for tokens, lengths, replaced in _map_chunks(_binarize_chunk, [text_path], workers, state):
            # One call per chunk: the fairseq flavour keeps no documents, only sequences.
            writer.add_document(tokens, sequence_lengths=lengths)
            written.sentences += len(lengths)
            written.tokens += len(tokens)
            written.replaced += replaced
    return written


# --- the command ------------------------------------------------------------------------------

def _prefixes(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value).split(",")   # as fairseq splits --validpref
    return [os.fspath(p) for p in value]


def _split_names(split: str, count: int) -> list[str]:
    return [split if k == 0 else f"{split}{k}" for k in range(count)]


def preprocess(*, source_lang: str, target_lang: str | None = None, trainpref=None, validpref=None,
               testpref=None, destdir: str = "data-bin", thresholdsrc: int = 0, thresholdtgt: int = 0,
               nwordssrc: int = -1, nwordstgt: int = -1, joined_dictionary: bool = False, padding_factor: int = 8,
               srcdict: str | None = None, tgtdict: str | None = None, workers: int = 1,
               dict_only: bool = False) -> PreprocessSummary:
    """``fairseq-preprocess --source-lang S --target-lang T ...`` with fairseq's arguments and
    defaults (``--dataset-impl mmap``); returns what was written.

    ``validpref`` / ``testpref`` are comma-separated prefixes (or lists), written as
    ``valid``, ``valid1``, ... as fairseq does. ``trainpref`` may be such a list too (fairseq
    takes one): its prefixes become the shards ``train``, ``train1``, ... that fairseq-train
    combines, all numbered with one dictionary built from all of them (what fairseq builds
    from their concatenation). Refuses, as fairseq does, to replace a ``dict.{lang}.txt`` of
    ``destdir`` it would build.
    """
    destdir = os.fspath(destdir)
    langs = [source_lang, target_lang]
    if not source_lang or not target_lang:
        raise ParameterError(f"give both source_lang= and target_lang=, got {source_lang!r} and {target_lang!r}")
    if source_lang == target_lang:
        raise ParameterError(f"source and target language are both {source_lang!r}")
    check_int("workers", workers, 1)
    numbers = dict(thresholdsrc=thresholdsrc, thresholdtgt=thresholdtgt, nwordssrc=nwordssrc, nwordstgt=nwordstgt,
                   padding_factor=padding_factor)
    for name, value in numbers.items():
        check_int(name, value)
    if joined_dictionary and srcdict and tgtdict:
        raise ParameterError("cannot use both srcdict= and tgtdict= with joined_dictionary=True")
    train, valid, test = _prefixes(trainpref), _prefixes(validpref), _prefixes(testpref)
    given = {source_lang: srcdict, target_lang: tgtdict}
    if joined_dictionary:
        given = dict.fromkeys(langs, srcdict or tgtdict)
    for lang, keyword, path in ((source_lang, "srcdict=", srcdict), (target_lang, "tgtdict=", tgtdict)):
        # As fairseq: checked on the flags as given, so --joined-dictionary --srcdict X
        # still refuses an existing dict.{tgt}.txt.
        existing = dictionary_path(destdir, lang)
        if not path and os.path.exists(existing):
            raise ParameterError(f"{existing} already exists; fairseq-preprocess refuses to replace it: remove "
                                 f"it, or give it as {keyword}")
        if not given[lang] and not train:
            raise ParameterError(f"trainpref= is needed to build the {lang} dictionary (or give {keyword})")
    outputs = [(split, prefix) for name, prefixes in (("train", train), ("valid", valid), ("test", test))
               for split, prefix in zip(_split_names(name, len(prefixes)), prefixes)]
    needed = [f"{prefix}.{lang}" for _, prefix in ([] if dict_only else outputs) for lang in langs]
    needed += [f"{prefix}.{lang}" for prefix in train for lang in langs if not given[lang]]
    needed += [path for path in (srcdict, tgtdict) if path]
    for path in dict.fromkeys(needed):
        if not os.path.isfile(path):
            raise ParameterError(f"{path}: no such file (the text of trainpref=, validpref= and testpref= is "
                                 f"PREFIX.{source_lang} and PREFIX.{target_lang}; dictionaries are files)")

    os.makedirs(destdir, exist_ok=True)
    staging = temporary_path(os.path.join(destdir, "fairseq-preprocess"))
    os.makedirs(staging)
    summary = PreprocessSummary(destdir)
    try:
        dictionaries = _dictionaries(langs, given, train, joined_dictionary, workers,
                                     thresholds=(thresholdsrc, thresholdtgt), nwords=(nwordssrc, nwordstgt),
                                     padding_factor=padding_factor)
        staged = []
        for lang in langs:
            name = os.path.basename(dictionary_path(destdir, lang))
            dictionaries[lang].save(os.path.join(staging, name))
            staged.append(name)
            summary.dictionaries[lang] = (dictionary_path(destdir, lang), len(dictionaries[lang]))
        if not dict_only:
            # fairseq writes every split of the source, then every split of the target.
            for lang in langs:
                for split, prefix in outputs:
                    name = f"{split}.{source_lang}-{target_lang}.{lang}"
                    written = binarize(f"{prefix}.{lang}", dictionaries[lang], os.path.join(staging, name),
                                       workers=workers)
                    written.split, written.lang, written.prefix = split, lang, os.path.join(destdir, name)
                    summary.files.append(written)
                    staged += [name + ".bin", name + ".idx"]
        for name in staged:
            os.replace(os.path.join(staging, name), os.path.join(destdir, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return summary


def _dictionaries(langs, given, train, joined, workers, *, thresholds, nwords, padding_factor) -> dict:
    if joined:
        if given[langs[0]]:
            dictionary = Dictionary.load(given[langs[0]])
        else:
            # One dictionary from both sides' training text, with the source's limits
            # (fairseq passes src=True for the joined one).
            dictionary = build_dictionary([f"{p}.{lang}" for lang in langs for p in train], threshold=thresholds[0],
                                          nwords=nwords[0], padding_factor=padding_factor, workers=workers)
        return dict.fromkeys(langs, dictionary)
    result = {}
    for lang, threshold, limit in zip(langs, thresholds, nwords):
        if given[lang]:
            result[lang] = Dictionary.load(given[lang])
        else:
            result[lang] = build_dictionary([f"{p}.{lang}" for p in train], threshold=threshold, nwords=limit,
                                            padding_factor=padding_factor, workers=workers)
    return result


__all__ = ["BinarizedFile", "PreprocessSummary", "binarize", "build_dictionary", "decode_lines", "decode_text",
           "preprocess", "text_chunks"]
