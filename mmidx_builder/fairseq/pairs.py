"""fairseq translation data: ``dict.{lang}.txt``, language-pair ``.bin/.idx`` files, and
``max_tokens`` batches (``fairseq_batches``), read as fairseq 0.12 reads them.

A binarized parallel corpus (``fairseq-preprocess``) is, per split and language::

    {split}.{src}-{tgt}.{src}.bin/.idx   source sentences, one sequence each
    {split}.{src}-{tgt}.{tgt}.bin/.idx   target sentences, same count, same order
    dict.{src}.txt, dict.{tgt}.txt       "<symbol> <count>" per line
    train1.{src}-{tgt}.*, train2...      extra shards, concatenated after train (combine=True)

The files may also carry the reverse direction in their names (``train.de-en.en`` read
as en->de), as ``load_langpair_dataset`` accepts. Pair ``i`` is what
``LanguagePairDataset.__getitem__`` returns with ``load_langpair_dataset``'s defaults:
the stored source and target ids unchanged (no BOS, no EOS added or removed). This module
never imports ``datasets`` or ``torch``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import IO, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ..storage.files import atomic_output, is_remote
from ..checks import check_int
from ..errors import FormatError, MissingPartnerError, ParameterError
# fairseq's max_tokens batching lives in its own module (pure index arithmetic); its names
# stay importable from here.
from .batches import batch_by_size, max_tokens_batches, ordered_indices, shard_batches  # noqa: F401
from ..dtypes import cast_tokens
from .items import PairItems
from ..sources.indexed import IndexedFile
from ..sources.token_source import Concatenated

OVERWRITE_FLAG = "#fairseq:overwrite"


# --- dictionary --------------------------------------------------------------------------

class Dictionary:
    """fairseq's ``Dictionary``: ``<s>``=0, ``<pad>``=1, ``</s>``=2, ``<unk>``=3, then the
    file's symbols in file order."""

    def __init__(self, *, bos="<s>", pad="<pad>", eos="</s>", unk="<unk>", extra_special_symbols=()):
        self.bos_word, self.pad_word, self.eos_word, self.unk_word = bos, pad, eos, unk
        self.symbols: list[str] = []
        self.counts: list[int] = []
        self.indices: dict[str, int] = {}
        self.bos_index = self.add_symbol(bos)
        self.pad_index = self.add_symbol(pad)
        self.eos_index = self.add_symbol(eos)
        self.unk_index = self.add_symbol(unk)
        for symbol in extra_special_symbols:
            self.add_symbol(symbol)
        self.nspecial = len(self.symbols)

    def add_symbol(self, word: str, n: int = 1, overwrite: bool = False) -> int:
        # As fairseq: a known word only gains count, unless overwrite, which appends it
        # again and points the word at the new id (the old id keeps decoding to it).
        if word in self.indices and not overwrite:
            index = self.indices[word]
            self.counts[index] += n
            return index
        index = len(self.symbols)
        self.indices[word] = index
        self.symbols.append(word)
        self.counts.append(n)
        return index

    @classmethod
    def load(cls, path: str | os.PathLike, *, opener: Callable[..., IO] | None = None) -> "Dictionary":
        """Reads a ``dict.txt`` exactly as fairseq 0.12.2's ``Dictionary.load`` does.

        A line is ``<symbol> <count>`` or ``<symbol> <count> #fairseq:overwrite`` (the
        symbol may hold spaces: the count is after the last one). A line that does not
        parse, or a repeated symbol without the flag, raises :class:`FormatError`.
        """
        path = os.fspath(path)
        dictionary = cls()
        # Text mode with universal newlines, as fairseq opens it.
        try:
            with (opener or open)(path, "r", encoding="utf-8") as f:
                lines = f.readlines()
        except UnicodeDecodeError as error:
            raise FormatError(path, "encoding", "UTF-8 text", f"undecodable bytes at byte {error.start}") from None
        for number, line in enumerate(lines, 1):
            parts = line.rstrip().rsplit(" ", 1)
            overwrite = len(parts) == 2 and parts[1] == OVERWRITE_FLAG
            if overwrite:
                parts = parts[0].rsplit(" ", 1)
            try:
                word, field = parts
                count = int(field)
            except ValueError:
                raise FormatError(path, f"line {number}", "'<token> <count> [#fairseq:overwrite]'",
                                  repr(line.rstrip("\r\n"))) from None
            if word in dictionary.indices and not overwrite:
                raise FormatError(path, f"line {number}", "a symbol not seen before", f"duplicate {word!r}",
                                  hint=f"end the line with {OVERWRITE_FLAG} to give the symbol a new id")
            dictionary.add_symbol(word, count, overwrite)
        return dictionary

    def save(self, path: str | os.PathLike) -> None:
        """Writes the symbols after the special ones, loadable by fairseq and :meth:`load`."""
        path = os.fspath(path)
        seen = set(self.symbols[:self.nspecial])
        lines = []
        for symbol, count in zip(self.symbols[self.nspecial:], self.counts[self.nspecial:]):
            # fairseq's own save drops the flag and so writes files it cannot load again.
            lines.append(f"{symbol} {count} {OVERWRITE_FLAG}\n" if symbol in seen else f"{symbol} {count}\n")
            seen.add(symbol)
        with atomic_output(path) as f:
            f.write("".join(lines).encode("utf-8"))

    def finalize(self, threshold: int = -1, nwords: int = -1, padding_factor: int = 8) -> None:
        """``Dictionary.finalize``, as ``fairseq-preprocess`` ends building a dictionary: the
        symbols after the special ones sorted by count, most frequent first, ties in code point
        order; only the ``nwords - nspecial`` first (``nwords <= 0``: all), and only down to
        the first one counted fewer than ``threshold`` times; then padded with
        ``madeupword0000``... to a multiple of ``padding_factor`` symbols."""
        if nwords <= 0:
            nwords = len(self)
        special = self.nspecial
        # Code point order first, then a stable sort by count: the order of fairseq's
        # Counter(dict(sorted(...))).most_common() (the dict keeps one of a repeated symbol).
        ranked = sorted(dict(sorted(zip(self.symbols[special:], self.counts[special:]))).items(),
                        key=lambda sc: -sc[1])
        kept = []
        for symbol, count in ranked[:max(nwords - special, 0)]:
            if count < threshold:
                break
            kept.append((symbol, count))
        self.symbols = self.symbols[:special] + [s for s, _ in kept]
        self.counts = self.counts[:special] + [c for _, c in kept]
        self.indices = {s: i for i, s in enumerate(self.symbols)}
        self.pad_to_multiple(padding_factor)

    def pad_to_multiple(self, padding_factor: int) -> None:
        """``pad_to_multiple_``: ``madeupword{i:04d}`` symbols (count 0) until the size is a
        multiple of ``padding_factor``; a made-up word already there only moves ``i`` on."""
        if padding_factor > 1:
            i = 0
            while len(self) % padding_factor:
                self.add_symbol(f"madeupword{i:04d}", n=0)
                i += 1

    def __len__(self) -> int:
        return len(self.symbols)

    def __getitem__(self, index: int) -> str:
        return self.symbols[index] if index < len(self.symbols) else self.unk_word

    def __contains__(self, symbol: str) -> bool:
        return symbol in self.indices

    def __eq__(self, other) -> bool:
        return isinstance(other, Dictionary) and self.indices == other.indices

    def index(self, symbol: str) -> int:
        return self.indices.get(symbol, self.unk_index)

    def encode(self, symbols: Iterable[str], append_eos: bool = True) -> np.ndarray:
        """Ids of ``symbols`` (unknown ones become ``<unk>``), EOS last as fairseq-preprocess writes."""
        ids = [self.index(s) for s in symbols] + ([self.eos_index] if append_eos else [])
        return np.array(ids, np.int64)

    def string(self, ids, bpe_symbol: str | None = None, include_eos: bool = False,
               unk_string: str | None = None) -> str:
        """``Dictionary.string``: the symbols joined by spaces, BOS (and EOS unless
        ``include_eos``) dropped, then ``post_process(bpe_symbol)``."""
        ignore = {self.bos_index} if include_eos else {self.bos_index, self.eos_index}
        unk = self.unk_word if unk_string is None else unk_string
        words = (unk if i == self.unk_index else self[i] for i in (int(i) for i in ids) if i not in ignore)
        return post_process(" ".join(words), bpe_symbol)


def post_process(sentence: str, symbol: str | None) -> str:
    """fairseq's ``data_utils.post_process`` for the subword schemes of text corpora."""
    if symbol == "sentencepiece":
        return sentence.replace(" ", "").replace("\u2581", " ").strip()
    if symbol == "wordpiece":
        return sentence.replace(" ", "").replace("_", " ").strip()
    if symbol == "letter":
        return sentence.replace(" ", "").replace("|", " ").strip()
    if symbol == "_EOW":
        return sentence.replace(" ", "").replace("_EOW", " ").strip()
    if symbol in ("subword_nmt", "@@ ", "@@"):
        marker = "@@ " if symbol == "subword_nmt" else symbol
        return (sentence + " ").replace(marker, "").rstrip()
    if symbol in (None, "none"):
        return sentence
    raise ParameterError(f"unknown bpe/post_process symbol {symbol!r}; use sentencepiece, wordpiece, "
                         "letter, _EOW, subword_nmt, '@@ ', '@@' or none")


# --- finding the pairs ---------------------------------------------------------------------

# {split}.{lang1}-{lang2}.{lang}.{bin,idx}; languages hold neither dots nor dashes.
_PAIR_NAME = re.compile(r"^(?P<name>.+)\.(?P<a>[^.\-/\\]+)-(?P<b>[^.\-/\\]+)\.(?P<lang>[^.\-/\\]+)\.(?P<ext>bin|idx)$")


def is_pair_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is named as fairseq-preprocess names a language pair's files."""
    return _PAIR_NAME.match(os.path.basename(os.fspath(path))) is not None


@dataclass(frozen=True)
class PairShard:
    """One shard of one split: ``train`` is shard 0, ``train1`` shard 1, ..."""

    split: str
    shard: int
    src: str
    tgt: str
    source_prefix: str  # e.g. data/train1.de-en.de (the .bin/.idx prefix)
    target_prefix: str


def _list(paths_or_dir) -> list[str]:
    if isinstance(paths_or_dir, (str, os.PathLike)) and os.path.isdir(paths_or_dir):
        folder = os.fspath(paths_or_dir)
        return [os.path.join(folder, name) for name in sorted(os.listdir(folder))]
    if isinstance(paths_or_dir, (str, os.PathLike)):
        return [os.fspath(paths_or_dir)]
    return [os.fspath(p) for p in paths_or_dir]


def find_language_pairs(paths_or_dir, src: str | None = None, tgt: str | None = None, *,
                        combine: Iterable[str] = ("train",)) -> dict[str, list[PairShard]]:
    """The language-pair shards among ``paths_or_dir`` (a folder, or ``.bin`` paths, with or
    without their ``.idx``), by split, each split's shards in order.

    Without ``src``/``tgt`` the pair is read from the file names (there must be only one,
    and its name's order is the direction). With them, ``{split}.{tgt}-{src}.*`` names are
    accepted too. Splits in ``combine`` take their shards ``{split}1``, ``{split}2``, ...
    up to the first missing one, as ``load_langpair_dataset(combine=True)``; other
    ``{split}{k}`` names stay splits of their own (fairseq's valid1, valid2 subsets).
    A source file whose target is missing raises :class:`MissingPartnerError`.
    """
    if (src is None) != (tgt is None):
        raise ParameterError(f"give both source and target languages or neither, got src={src!r} tgt={tgt!r}")
    files: dict[tuple[str, str, str, str], set[str]] = {}  # (folder, name, a-b, lang) -> {bin, idx}
    pairs_seen = set()
    for path in _list(paths_or_dir):
        folder, base = os.path.split(path)
        match = _PAIR_NAME.match(base)
        if not match:
            continue
        key = (folder, match["name"], f"{match['a']}-{match['b']}", match["lang"])
        files.setdefault(key, set()).add(match["ext"])
        # data_files list only the .bin of each pair: its .idx goes with it, unless a local
        # one is missing (remote partners are checked when the files are opened).
        partner = path[:-4] + ".idx"
        if match["ext"] == "bin" and (is_remote(path) or os.path.isfile(partner)):
            files[key].add("idx")
        pairs_seen.add((match["a"], match["b"]))
    if src is None:
        if not pairs_seen:
            raise ParameterError(f"no fairseq language-pair files ({{split}}.{{src}}-{{tgt}}.{{lang}}.bin) "
                                 f"among {_list(paths_or_dir)[:5]}")
        directions = sorted(pairs_seen)
        if len({frozenset(p) for p in directions}) > 1:
            raise ParameterError(f"several language pairs found ({', '.join('-'.join(p) for p in directions)}); "
                                 "give the source and target languages")
        src, tgt = directions[0]
    if src == tgt:
        raise ParameterError(f"source and target language are both {src!r}")

    def exists(folder, name, direction, lang):
        # fairseq's split_exists (dataset_exists with the mmap impl): both files there.
        return files.get((folder, name, direction, lang)) == {"bin", "idx"}

    def shard(folder, name) -> tuple[str, str] | None:
        for direction in (f"{src}-{tgt}", f"{tgt}-{src}"):
            if exists(folder, name, direction, src):
                prefix = os.path.join(folder, f"{name}.{direction}.")
                if not exists(folder, name, direction, tgt):
                    raise MissingPartnerError(prefix + tgt + ".bin", "file",
                                              f"the target side of {prefix + src}.bin/.idx", "no such file pair",
                                              hint="every source file needs its target file (.bin and .idx)")
                return prefix + src, prefix + tgt
        half = [(f, n, d, lang) for (f, n, d, lang), ext in files.items()
                if f == folder and n == name and d in (f"{src}-{tgt}", f"{tgt}-{src}") and ext != {"bin", "idx"}]
        if half:
            f, n, d, lang = half[0]
            present = sorted(files[half[0]])[0]
            missing = "idx" if present == "bin" else "bin"
            raise MissingPartnerError(os.path.join(f, f"{n}.{d}.{lang}.{missing}"), "file",
                                      f"the partner of {os.path.join(f, f'{n}.{d}.{lang}.{present}')}",
                                      "no such file", hint="a .bin/.idx pair needs both files")
        for direction in (f"{src}-{tgt}", f"{tgt}-{src}"):
            if exists(folder, name, direction, tgt):
                prefix = os.path.join(folder, f"{name}.{direction}.")
                raise MissingPartnerError(prefix + src + ".bin", "file", f"the source side of {prefix + tgt}.bin/.idx",
                                          "no such file pair", hint="every target file needs its source file")
        return None

    names = sorted({(folder, name) for (folder, name, direction, _) in files
                    if direction in (f"{src}-{tgt}", f"{tgt}-{src}")})
    combine = set(combine)
    taken: set[tuple[str, str]] = set()
    result: dict[str, list[PairShard]] = {}
    for folder, name in names:
        if name in combine:
            for k in range(1, len(names) + 1):
                if (folder, f"{name}{k}") not in names or shard(folder, f"{name}{k}") is None:
                    break
                taken.add((folder, f"{name}{k}"))
    for folder, name in names:
        if (folder, name) in taken:
            continue
        prefixes = shard(folder, name)
        if prefixes is None:
            continue  # files of neither language under this name
        shards = result.setdefault(name, [])
        if shards and os.path.dirname(shards[0].source_prefix) != folder:
            raise ParameterError(f"split {name!r} is in two folders: {os.path.dirname(shards[0].source_prefix)} "
                                 f"and {folder}; give one folder or the files of one")
        shards.append(PairShard(name, 0, src, tgt, *prefixes))
        if name in combine:
            for k in range(1, len(names) + 1):
                if (folder, f"{name}{k}") not in taken:
                    break
                shards.append(PairShard(name, k, src, tgt, *shard(folder, f"{name}{k}")))
    if not result:
        raise ParameterError(f"no {src}->{tgt} source files ({{split}}.{src}-{tgt}.{src}.bin/.idx "
                             f"or {{split}}.{tgt}-{src}.{src}.bin/.idx)")
    return result


def dictionary_path(folder: str, lang: str) -> str:
    """Where fairseq looks for a language's dictionary: ``{folder}/dict.{lang}.txt``."""
    return os.path.join(folder, f"dict.{lang}.txt")


# --- the pairs -------------------------------------------------------------------------------

def check_upsample_primary(value) -> None:
    """fairseq's ``--upsample-primary``: a whole number of at least 1."""
    check_int("upsample_primary", value, 1)


class LanguagePairs:
    """Sentence pairs of one split: shards concatenated as fairseq's ``ConcatDataset`` does,
    the primary (first) shard repeated ``upsample_primary`` times. A split of one shard is
    never repeated: ``load_langpair_dataset`` makes a ``ConcatDataset``, and so upsamples,
    only from several shards.

    Pair ``i`` is ``LanguagePairDataset[i]``'s ``source`` and ``target`` under
    ``load_langpair_dataset``'s defaults: the stored ids, unchanged. ``items``
    (:class:`~mmidx_builder.fairseq_items.PairItems`, made by :meth:`open` from
    ``prepend_bos``, ``truncate_source``, ``append_source_id``) changes them as those
    options do, and ``source_sizes`` / ``target_sizes`` as fairseq's ``sizes``.
    """

    def __init__(self, shards: Sequence[tuple[IndexedFile, IndexedFile]], upsample_primary: int = 1, *,
                 items: PairItems | None = None):
        if not shards:
            raise ParameterError("LanguagePairs needs at least one (source, target) shard")
        check_upsample_primary(upsample_primary)
        for source, target in shards:
            if source.num_sequences != target.num_sequences:
                raise FormatError(target.idx_path, "sequence count",
                                  f"{source.num_sequences} sentences, as many as {source.idx_path}",
                                  f"{target.num_sequences}", hint="the two sides of a pair must align line by line")
        self.shards = list(shards)
        self.source = Concatenated([s for s, _ in shards])
        self.target = Concatenated([t for _, t in shards])
        ratios = [int(upsample_primary) if len(shards) > 1 else 1] + [1] * (len(shards) - 1)
        real = np.array([s.num_sequences for s, _ in shards], np.int64)
        # ConcatDataset.cumsum: shard k covers ids [ends[k-1], ends[k]); an id past a
        # shard's real size wraps around (the upsampled primary).
        self._real_sizes = real
        self._ends = np.cumsum(real * np.array(ratios, np.int64))
        self.items = items or PairItems()
        self.source_sizes = self.items.source_sizes(self._gather_sizes(self.source))
        self.target_sizes = self.items.target_sizes(self._gather_sizes(self.target))

    @classmethod
    def open(cls, shards: Sequence[PairShard], *, upsample_primary: int = 1, prepend_bos: bool = False,
             truncate_source: bool = False, max_source_positions: int = 1024, append_source_id: bool = False,
             dictionaries: tuple[Dictionary, Dictionary] | None = None,
             opener: Callable[..., IO[bytes]] | None = None) -> "LanguagePairs":
        """The pairs of a split's shards, with ``load_langpair_dataset``'s item options
        (``append_source_id`` needs the (source, target) ``dictionaries``)."""
        if not shards:
            raise ParameterError("LanguagePairs needs at least one (source, target) shard")
        items = PairItems.langpair(prepend_bos=prepend_bos, truncate_source=truncate_source,
                                   max_source_positions=max_source_positions, append_source_id=append_source_id,
                                   langs=(shards[0].src, shards[0].tgt), dictionaries=dictionaries)
        files = [(IndexedFile.open(s.source_prefix, opener=opener), IndexedFile.open(s.target_prefix, opener=opener))
                 for s in shards]
        return cls(files, upsample_primary=upsample_primary, items=items)

    def collater(self, **options):
        """A :class:`~mmidx_builder.training.FairseqCollater` for these pairs (torch), with the
        EOS fairseq collates them with; ``options`` are its own (``left_pad_source``...)."""
        from .collater import FairseqCollater

        return FairseqCollater(eos=self.items.collate_eos, **options)

    @property
    def num_pairs(self) -> int:
        return int(self._ends[-1])

    def __len__(self) -> int:
        return self.num_pairs

    def sequence_ids(self, ids) -> np.ndarray:
        """The sequence (across all shards, as in ``self.source``/``self.target``) of pair ids."""
        ids = np.asarray(ids, np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_pairs):
            raise ParameterError(f"pair ids must lie in [0, {self.num_pairs})")
        shard = np.searchsorted(self._ends, ids, side="right")
        shard_start = np.concatenate(([0], self._ends[:-1]))[shard]
        local = (ids - shard_start) % self._real_sizes[shard]
        return self.source.first_sequence[shard] + local

    def _gather_sizes(self, side: Concatenated) -> np.ndarray:
        return side.sequence_lengths.astype(np.int64)[self.sequence_ids(np.arange(self.num_pairs))]

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, target ids) of pair ``i``, as int64 like fairseq's tensors."""
        i = int(i)
        if i < 0:
            i += self.num_pairs
        sequence = self.sequence_ids([i])
        source = self.source.read_pieces(sequence, [0], self.source.lengths_view[sequence])
        target = self.target.read_pieces(sequence, [0], self.target.lengths_view[sequence])
        return self.items.source(source.astype(np.int64)), self.items.target(target.astype(np.int64))

    def __repr__(self) -> str:
        return f"LanguagePairs({self.num_pairs} pairs, {len(self.shards)} shard(s))"


def _list_array(side: Concatenated, sequences: np.ndarray) -> pa.ListArray:
    lengths = np.asarray(side.lengths_view[sequences], np.int64)
    offsets = np.zeros(len(sequences) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = side.read_pieces(sequences, np.zeros(len(sequences), np.int64), lengths)
    if offsets[-1] < 2**31:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat))
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat))


def _changed_lists(pairs: LanguagePairs, ids: np.ndarray) -> list[pa.Array]:
    """The source and target columns when item options change the stored ids: row by row,
    in the files' dtypes (the ids options add are dictionary ids, which fit them)."""
    rows = [pairs[int(i)] for i in ids]
    columns = []
    for side, dtype in ((0, pairs.source.dtype), (1, pairs.target.dtype)):
        values = [cast_tokens(row[side], dtype) for row in rows]
        columns.append(pa.array(values, pa.list_(pa.from_numpy_dtype(dtype))))
    return columns


def pair_schema(pairs: LanguagePairs, with_text: bool = False) -> pa.Schema:
    """The schema of :func:`pair_tables`' tables."""
    fields = [pa.field("id", pa.int64()),
              pa.field("source", pa.list_(pa.from_numpy_dtype(pairs.source.dtype))),
              pa.field("target", pa.list_(pa.from_numpy_dtype(pairs.target.dtype)))]
    if with_text:
        fields += [pa.field("source_text", pa.string()), pa.field("target_text", pa.string())]
    return pa.schema(fields)


def pair_tables(pairs: LanguagePairs, start: int = 0, stop: int | None = None, batch_size: int = 1000,
                dictionaries: tuple[Dictionary, Dictionary] | None = None,
                bpe: str | None = None) -> Iterator[pa.Table]:
    """Pairs ``start:stop`` as Arrow tables of up to ``batch_size`` rows: ``id`` (int64),
    ``source`` and ``target`` (lists of the files' dtypes), and with ``dictionaries``
    (source, target) also ``source_text`` / ``target_text``, decoded with ``bpe``."""
    stop = pairs.num_pairs if stop is None else min(int(stop), pairs.num_pairs)
    batch_size = check_int("batch_size", batch_size, 1)
    schema = pair_schema(pairs, dictionaries is not None)
    for begin in range(int(start), stop, batch_size):
        ids = np.arange(begin, min(begin + batch_size, stop), dtype=np.int64)
        sequences = pairs.sequence_ids(ids)
        if pairs.items.changes_items:
            columns = [pa.array(ids), *_changed_lists(pairs, ids)]
        else:
            columns = [pa.array(ids), _list_array(pairs.source, sequences), _list_array(pairs.target, sequences)]
        if dictionaries is not None:
            for column, dictionary in zip(columns[1:3], dictionaries):
                columns.append(pa.array([dictionary.string(row, bpe) for row in
                                         column.to_numpy(zero_copy_only=False)], pa.string()))
        # By names, not schema: a batch of over 2**31 tokens holds large lists.
        yield pa.Table.from_arrays(columns, names=schema.names)

