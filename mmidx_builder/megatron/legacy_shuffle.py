"""``numpy.random.RandomState.shuffle`` of a large 1-d array, the same permutation and the same
generator state after, in a fraction of the time.

megatron-core shuffles its document index (one int32 per document and epoch: 800 MB at 200M
documents) and its shuffle index with ``RandomState.shuffle``, and the indices are only its
indices if they are shuffled by the same draws in the same order. numpy's loop swaps
``x[i]`` with ``x[j]`` for ``i = n-1 .. 1``, ``j = random_interval(i)``; at 200M elements
each swap waits on a cache miss (12-24 s on the 2-core machine, most of a cold build). Here:

1. the ``j`` are drawn from the same MT19937 stream (``random_raw`` gives the 32-bit words
   ``random_interval`` reads) and accepted as it does (``word & mask <= i``, else the next
   word), many at once: a word's fate depends on how many words before it were refused, so
   each window is first decided as if none were, then checked with the count of refusals that
   guess implies; up to the first word where the two differ, the guess is exact.
2. the swaps are applied many at once with numpy's gathers and scatters, whose independent
   loads overlap their misses: a block of consecutive ``i`` is done together up to the first
   swap that touches a place an earlier swap of the block wrote (then the block restarts
   there): for blocks of ~sqrt(i/16) swaps, about one block in eight.

Arrays of under 24 MiB (SMALL_BYTES; 64 MiB, ALONE_BYTES, where nothing runs beside the
shuffle) take numpy's loop, faster while they fit the caches.

Measured on the 2-core machine, 200M int32, five runs each: numpy's shuffle 12.2-14.4 s, this
6.9-8.4 s; on another day, two runs each, 11.1-11.4 s against 6.6-7.1 s
(``tests/test_legacy_shuffle.py`` checks arrays and generator states against numpy's).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

# Arrays under this many bytes go through numpy's own loop: it is faster while the array fits
# the caches (measured on the 2-core machine, int32: 1.32x numpy's time at 2M elements, 1.06x at
# 4M, 0.84x at 8M, 0.69x at 32M; on another day, its L3 32 MiB: 3.3x, 2.4x, 1.7x at 8M, 0.97x
# at 16M, 0.76x at 32M). Where numpy's loop stops being faster moves with the machine; there,
# 64 MiB made the index build of benchmarks/bench_builder.py slower, not faster (1.02-1.36 s
# against 0.91-0.96 s): past this size the shuffle index, made in a thread (sampling.py), lets
# go of the GIL between its numpy calls, where numpy's loop holds it throughout.
SMALL_BYTES = 24 << 20
# The same for a shuffle that nothing runs beside (the document index): numpy's loop holding
# the GIL stalls no one there. int32, best of 3, numpy's time / this module's: on a machine of
# L3 480 MiB 0.55x at 10M elements, 0.72x at 16M, 0.84x at 24M, 0.94x at 32M, 1.05x at 60M;
# on one of L3 32 MiB, 0.97x at 16M and 1.32x at 32M; on one of L3 105 MiB numpy's loop was the
# faster at every size from 4M to 64M (0.68-0.79x this module's time); at 200M, 1.12-1.14x.
ALONE_BYTES = 64 << 20
# Intervals drawn and swapped per round: bounds the temporaries (two int64 arrays).
ROUND = 1 << 18
# Swaps applied together at most (the block's sort and gathers stay in the caches).
MAX_BLOCK = 8192
# Words decided at a time (a few arrays of them stay in the caches).
WINDOW = 1 << 16
# 32-bit words drawn from the generator at a time.
_WORDS = 1 << 18


def shuffle(x: np.ndarray, rng: np.random.RandomState, alone: bool = False) -> None:
    """``rng.shuffle(x)``, in place: the same permutation, ``rng`` left in the same state.
    ``alone``: nothing runs beside this shuffle in another thread (ALONE_BYTES then, not
    SMALL_BYTES, decides where numpy's loop stops)."""
    generator = getattr(rng, "_bit_generator", None)  # the legacy stream's own words are what it draws
    small = ALONE_BYTES if alone else SMALL_BYTES
    if (type(x) is not np.ndarray or x.ndim != 1 or len(x) < 2 or x.nbytes < small or len(x) - 1 > 0xFFFFFFFF
            or not isinstance(generator, np.random.MT19937)):
        rng.shuffle(x)  # numpy's path: small, or drawn in 64-bit words, or not an MT19937 stream
        return
    n = len(x)
    words = _Words(generator)
    top = n - 1
    while top >= 1:
        mask = (1 << top.bit_length()) - 1  # random_interval's mask: the smallest 2^k - 1 >= i
        count = min(ROUND, top - (mask >> 1))  # i down to the band's floor share the mask
        _swap_in_order(x, top, _intervals(words, top, count, mask))
        top -= count
    words.settle()


class _Words:
    """The generator's 32-bit words, looked at ahead and then consumed; ``settle`` leaves the
    generator just after the last word consumed, as if it had been drawn one at a time."""

    def __init__(self, generator: np.random.MT19937):
        self._generator = generator
        self._buffer = np.empty(0, np.int64)
        self._at = 0  # index in the buffer of the next word to consume
        self._consumed = 0  # words consumed in all
        self._drawn = 0  # words drawn from the generator in all
        self._states = deque(maxlen=4)  # (words drawn before, generator state then)

    def ahead(self, count: int) -> np.ndarray:
        """The next ``count`` words (int64), not consumed."""
        if len(self._buffer) - self._at < count:
            self._states.append((self._drawn, self._generator.state))
            fresh = max(_WORDS, count)
            # random_raw gives MT19937's 32-bit words in uint64: as int64, compared with ints exactly
            self._buffer = np.concatenate([self._buffer[self._at:],
                                           self._generator.random_raw(fresh).view(np.int64)])
            self._at = 0
            self._drawn += fresh
        return self._buffer[self._at:self._at + count]

    def consume(self, count: int) -> None:
        self._at += count
        self._consumed += count

    def settle(self) -> None:
        drawn, state = next((d, s) for d, s in reversed(self._states) if d <= self._consumed)
        self._generator.state = state
        self._generator.random_raw(self._consumed - drawn)


def _intervals(words: _Words, top: int, count: int, mask: int) -> np.ndarray:
    """``random_interval(i)`` for ``i = top, top-1, .., top-count+1`` (all under ``mask``)."""
    out = np.empty(count, np.int64)
    done, i = 0, top
    # Windows (WINDOW) that stay in the caches: twice-checked guesses are exact for ~(6 mask^2)^(1/3)
    # words (~10^6 for a mask of 2^28, so a whole window), once-checked ones for ~2 sqrt(mask).
    while done < count:
        need = count - done
        # Words for `need` acceptances, i accepted with odds (i + 1) / (mask + 1), and a margin
        # (need <= i: a round never passes i = 1).
        expected = (mask + 1) * math.log((i + 1) / (i + 1 - need))
        drawn = words.ahead(min(WINDOW, int(1.02 * expected) + 256)) & mask
        decided = _decided(drawn, i)
        accepted = np.flatnonzero(decided)[:need]
        used = int(accepted[-1]) + 1 if len(accepted) == need else len(decided)
        out[done:done + len(accepted)] = drawn[accepted]
        words.consume(used)
        done += len(accepted)
        i -= len(accepted)
    return out


def _decided(drawn: np.ndarray, i: int, checks: int = 3) -> np.ndarray:
    """Whether each of the words ``drawn`` (masked) is accepted, ``i`` being the interval's top
    at the first; as long a prefix as the checks make certain (at least one word).

    A word is accepted when it is at most ``i - (words accepted before it)``. Guess every
    outcome, count the refusals the guess implies before each word and decide each word with
    that count: up to the first word where decision and guess differ, the guess is exact (by
    induction: exact outcomes before a word give its exact count), and so is the decision at
    that word. The first guess (no refusal before) is wrong where a word falls within the
    refusals so far of its bound; deciding again from the decisions leaves errors only within
    the few wrong guesses before, far sparser."""
    steps = np.arange(len(drawn))
    guessed = drawn <= i - steps
    for _ in range(checks):
        refused = ~guessed
        checked = drawn <= i - steps + (np.cumsum(refused) - refused)
        wrong = np.flatnonzero(guessed != checked)
        if not len(wrong):
            return checked
        guessed = checked
    return checked[:wrong[0] + 1]


def _swap_in_order(x: np.ndarray, top: int, js: np.ndarray) -> None:
    """``x[i], x[j] = x[j], x[i]`` for ``i = top - k``, ``j = js[k]``, k = 0, 1, .. in order."""
    k = 0
    while k < len(js):
        i = top - k
        size = min(len(js) - k, max(1, min(MAX_BLOCK, math.isqrt(i // 16))))
        j = js[k:k + size]
        # Done together, swaps are done in order unless one touches a place an earlier one of
        # the block wrote: its j equal to an earlier j, or its i equal to an earlier j (the i
        # are above every later j, so nothing else can meet).
        cut = size
        low = i - size + 1
        ordered = np.sort(j)
        if ordered[-1] >= low:  # rare (one block in ~16): which j, if any, is a later swap's i
            on_later_i = np.flatnonzero((j >= low) & (j < i - np.arange(size)))
            if len(on_later_i):
                cut = int((i - j[on_later_i]).min())  # the swap whose i that j is
        if (ordered[1:] == ordered[:-1]).any():
            by_place = np.argsort(j, kind="stable")
            repeats = by_place[1:][j[by_place[1:]] == j[by_place[:-1]]]
            cut = min(cut, int(repeats.min()))
        j = j[:cut]
        upper = x[i - cut + 1:i + 1][::-1]  # x[i], x[i-1], .. for the swaps kept
        mine = upper.copy()
        upper[:] = x[j]
        x[j] = mine
        k += cut
