"""Sampling indices and sample assembly, checked against references written from the spec.

The references here are deliberately plain: the epoch-ordered token stream spelled out one
token at a time, and the helpers.cpp walk from shared/SAMPLING.md as a loop. megatron-core
itself is the oracle in test_sampling_oracle.py.
"""

import multiprocessing
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmidx_builder.megatron import sampling
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class ListSource:
    """The smallest source assemble_samples accepts: sequences held in memory."""

    def __init__(self, sequences, dtype=np.int32):
        self.sequences = [np.asarray(s, dtype) for s in sequences]
        self.sequence_lengths = np.array([len(s) for s in self.sequences], np.int32)
        self.dtype = np.dtype(dtype)

    def read_pieces(self, sequence_ids, offsets, lengths, out=None):
        parts = [self.sequences[i][o:o + n] for i, o, n in zip(sequence_ids, offsets, lengths)]
        for part, n in zip(parts, lengths):
            assert len(part) == n, "read past the end of a sequence"
        result = np.concatenate(parts) if parts else np.empty(0, self.dtype)
        if out is None:
            return result
        out[:] = result
        return out


def labelled_sequences(lengths):
    """Sequence i holds tokens i*10000 + position: any misplaced token shows."""
    return [np.arange(n, dtype=np.int32) + 10000 * i for i, n in enumerate(lengths)]


def token_stream(indices, lengths):
    """(document-index position, offset) of every token in epoch order, one by one."""
    where = []
    for position, sequence in enumerate(indices.document_index.tolist()):
        where.extend((position, offset) for offset in range(lengths[sequence]))
    return where


def stream_sample_index(document_index, lengths, seq_length, extra):
    """Row k from its definition: the token at k * L (E=1), or just after token k*L - 1 (E=0)."""
    where = []
    for position, sequence in enumerate(document_index.tolist()):
        where.extend((position, offset) for offset in range(lengths[sequence]))
    total = (len(where) - extra) // seq_length
    rows = [(0, 0)]
    for k in range(1, total + 1):
        if extra:
            rows.append(where[k * seq_length])
        else:
            position, offset = where[k * seq_length - 1]
            rows.append((position, offset + 1))
    return rows


def cpp_walk_sample_index(document_index, lengths, seq_length, extra):
    """helpers.cpp's build_sample_idx as SAMPLING.md writes it, a plain loop."""
    total = (sum(lengths[d] for d in document_index.tolist()) - extra) // seq_length
    rows = [(0, 0)]
    di, off = 0, 0
    for _ in range(total):
        remaining = seq_length + extra
        while remaining != 0:
            length = lengths[document_index[di]] - off
            remaining -= length
            if remaining <= 0:
                off += remaining + length - extra
                remaining = 0
            elif di == len(document_index) - 1:
                off = lengths[document_index[di]] - extra
                break
            else:
                di += 1
                off = 0
        rows.append((di, off))
    return rows


lengths_lists = st.lists(st.one_of(st.just(0), st.integers(1, 40), st.integers(41, 200)), min_size=1, max_size=25) \
    .filter(lambda ls: sum(ls) >= 3)


# --- golden: the seed example ---------------------------------------------------------------

def test_seed_example_sample_index():
    sizes = np.array([20, 50, 60, 30, 100, 5], np.int32)
    index = sampling.build_sample_index(sizes, np.arange(6, dtype=np.int32), 30, 265, True)
    assert index.tolist() == [[0, 0], [1, 10], [1, 40], [2, 20], [2, 50], [3, 20], [4, 20], [4, 50], [4, 80]]
    assert index.dtype == np.int32


def test_count_samples_rules():
    # 265 tokens, L 30, E 1: (265 - 1) // 30 = 8 per epoch; whole epochs count every sample.
    assert sampling.count_samples(265, seq_length=30) == (1, 8)
    assert sampling.count_samples(265, seq_length=30, num_epochs=3) == (3, (3 * 265 - 1) // 30)
    assert sampling.count_samples(265, seq_length=30, num_epochs=2, add_extra_token=False) == (2, 530 // 30)
    # num_samples: fewest epochs e with e * 265 >= N * 30 + 1.
    assert sampling.count_samples(265, seq_length=30, num_samples=8) == (1, 8)
    assert sampling.count_samples(265, seq_length=30, num_samples=9) == (2, 9)
    assert sampling.count_samples(265, seq_length=30, num_samples=22) == (3, 22)  # 661 > 530
    assert sampling.count_samples(265, seq_length=30, num_samples=17) == (2, 17)  # 511 <= 530


@pytest.mark.parametrize("call, words", [
    (lambda: sampling.count_samples(100, seq_length=0), "seq_length"),
    (lambda: sampling.count_samples(0, seq_length=8), "no tokens"),
    (lambda: sampling.count_samples(100, seq_length=8, num_epochs=1, num_samples=3), "not both"),
    (lambda: sampling.count_samples(100, seq_length=8, num_samples=0), "num_samples"),
    (lambda: sampling.count_samples(100, seq_length=8, num_epochs=0), "num_epochs"),
    (lambda: sampling.count_samples(10, seq_length=30), "lower seq_length"),
    (lambda: sampling.count_samples(100, seq_length=2.5), "seq_length= must be a whole number, got 2.5"),
    (lambda: sampling.build_indices(np.array([0, 0, 0]), seq_length=4, seed=1), "no tokens"),
    (lambda: sampling.build_indices(np.array([], np.int32), seq_length=4, seed=1), "no sequences"),
    (lambda: sampling.build_indices(np.array([5, -1]), seq_length=4, seed=1), "sequence 1"),
    (lambda: sampling.build_indices(np.array([50]), seq_length=4, seed=-1), "seed"),
    (lambda: sampling.build_indices(np.array([50]), seq_length=4, seed=2**32), "2**32"),
])
def test_bad_parameters_say_what_to_change(call, words):
    with pytest.raises(ParameterError, match=words.replace("*", r"\*")):
        call()


def test_sample_ids_out_of_range():
    indices = sampling.build_indices(np.array([50, 7]), seq_length=8, seed=1, num_samples=3)
    source = ListSource(labelled_sequences([50, 7]))
    with pytest.raises(ParameterError, match="out of range"):
        sampling.assemble_samples(source, indices, [3])  # training sees 0..2, though 7 are built
    with pytest.raises(ParameterError, match="1-D integer"):
        sampling.assemble_samples(source, indices, [0.5])


# --- the vectorised sample index equals both plain references ---------------------------------

@FAST
@given(lengths=lengths_lists, seq_length=st.integers(1, 60), extra=st.integers(0, 1),
       epochs=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_sample_index_equals_plain_references(lengths, seq_length, extra, epochs, seed):
    document_index = np.tile(np.arange(len(lengths), dtype=np.int32), epochs)
    np.random.RandomState(seed).shuffle(document_index)
    sizes = np.array(lengths, np.int32)
    total_tokens = epochs * int(sizes.sum())
    if (total_tokens - extra) // seq_length < 1:
        return
    index = sampling.build_sample_index(sizes, document_index, seq_length, total_tokens, extra)
    rows = [tuple(r) for r in index.tolist()]
    assert rows == stream_sample_index(document_index, lengths, seq_length, extra)
    assert rows == cpp_walk_sample_index(document_index, lengths, seq_length, extra)


def test_sample_index_across_chunks(monkeypatch):
    # Many sequences, some empty, a chunk far smaller than the input: the chunk seams must not show.
    monkeypatch.setattr(sampling, "_CHUNK", 7)
    rng = np.random.RandomState(3)
    lengths = rng.randint(0, 9, 300).tolist()
    document_index = np.tile(np.arange(300, dtype=np.int32), 2)
    rng.shuffle(document_index)
    for seq_length, extra in ((5, 1), (5, 0), (1, 1), (13, 0)):
        total_tokens = 2 * sum(lengths)
        sizes = np.array(lengths, np.int32)
        index = sampling.build_sample_index(sizes, document_index, seq_length, total_tokens, extra)
        assert [tuple(r) for r in index.tolist()] == stream_sample_index(document_index, lengths, seq_length, extra)


# --- properties of the three indices ------------------------------------------------------------

@FAST
@given(lengths=lengths_lists, seq_length=st.integers(1, 40), extra=st.booleans(), seed=st.integers(0, 2**32 - 1),
       amount=st.one_of(st.tuples(st.just("epochs"), st.integers(1, 4)),
                        st.tuples(st.just("samples"), st.floats(0.01, 3.5))))
def test_indices_properties(lengths, seq_length, extra, seed, amount):
    tokens = sum(lengths)
    if amount[0] == "epochs":
        kwargs = {"num_epochs": amount[1]}
    else:
        kwargs = {"num_samples": max(1, int(amount[1] * ((tokens - extra) // seq_length)))}
    try:
        indices = sampling.build_indices(np.array(lengths, np.int32), seq_length=seq_length, seed=seed,
                                         add_extra_token=extra, **kwargs)
    except ParameterError:
        assert (tokens * kwargs.get("num_epochs", 1) - extra) // seq_length < 1
        return
    n = len(lengths)
    assert indices.document_index.dtype == np.int32 and indices.shuffle_index.dtype == np.uint32
    assert np.array_equal(np.bincount(indices.document_index, minlength=n), np.full(n, indices.num_epochs))
    if indices.separate_final_epoch:
        assert np.array_equal(np.sort(indices.document_index[-n:]), np.arange(n))
    assert np.array_equal(np.sort(indices.shuffle_index), np.arange(indices.total_samples))
    assert indices.num_samples <= indices.total_samples
    if amount[0] == "epochs":
        assert indices.num_samples == indices.total_samples and not indices.separate_final_epoch

    source = ListSource(labelled_sequences(lengths))
    ids = np.arange(indices.num_samples)
    samples = sampling.assemble_samples(source, indices, ids)
    assert samples.shape == (indices.num_samples, seq_length + extra)
    # Sample i is the stretch of the epoch-ordered stream at shuffle_index[i] * L.
    stream = np.concatenate([source.sequences[s] for s in indices.document_index])
    for i, j in enumerate(indices.shuffle_index[:indices.num_samples].tolist()):
        assert np.array_equal(samples[i], stream[j * seq_length: j * seq_length + seq_length + extra])
    reference = list(sampling.iter_reference_samples(source, indices))
    assert np.array_equal(np.stack(reference), samples)


@FAST
@given(lengths=lengths_lists, seed=st.integers(0, 2**32 - 2))
def test_same_seed_same_arrays_other_seed_other_order(lengths, seed):
    sizes = np.array(lengths + [5] * 12, np.int32)  # enough sequences that two shuffles cannot agree by luck
    a = sampling.build_indices(sizes, seq_length=3, seed=seed, num_epochs=2)
    b = sampling.build_indices(sizes, seq_length=3, seed=seed, num_epochs=2)
    c = sampling.build_indices(sizes, seq_length=3, seed=seed + 1, num_epochs=2)
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.document_index, c.document_index)
    assert not np.array_equal(a.shuffle_index, c.shuffle_index)


def test_partial_final_epoch_is_shuffled_apart():
    # 40 sequences of 10 tokens, L 10, E 1: 39 samples per epoch. 2.25 epochs -> final epoch
    # gives ~10 samples, far below 80% of 39: shuffled apart. 2.9 epochs -> not.
    sizes = np.full(40, 10, np.int32)
    partial = sampling.build_indices(sizes, seq_length=10, seed=7, num_samples=88)
    assert partial.num_epochs == 3 and partial.separate_final_epoch
    first = partial.document_index[:80]
    assert np.array_equal(np.bincount(first, minlength=40), np.full(40, 2))
    cut = ((3 - 1) * 400 - 1) // 10  # samples of the whole epochs before the final one
    assert np.array_equal(np.sort(partial.shuffle_index[:cut]), np.arange(cut))
    nearly_full = sampling.build_indices(sizes, seq_length=10, seed=7, num_samples=115)
    assert nearly_full.num_epochs == 3 and not nearly_full.separate_final_epoch


# --- pieces and document structure ---------------------------------------------------------------

@FAST
@given(lengths=lengths_lists, seq_length=st.integers(1, 30), extra=st.booleans(), seed=st.integers(0, 1000))
def test_document_structure_from_the_stream(lengths, seq_length, extra, seed):
    try:
        indices = sampling.build_indices(np.array(lengths, np.int32), seq_length=seq_length, seed=seed,
                                         add_extra_token=extra, num_epochs=2)
    except ParameterError:
        return
    ids = np.arange(indices.num_samples)[::-1]
    position_ids, piece_lengths = sampling.document_structure(indices, np.array(lengths), ids)
    assert position_ids.shape == (len(ids), indices.sample_length) and position_ids.dtype == np.int32
    where = token_stream(indices, lengths)
    for row, i in enumerate(ids.tolist()):
        start = int(indices.shuffle_index[i]) * seq_length
        owners = [position for position, _ in where[start:start + indices.sample_length]]
        # Runs of one document-index position are the pieces; positions count from each run's start.
        runs = [1]
        expected_positions = [0]
        for before, after in zip(owners, owners[1:]):
            if after == before:
                runs[-1] += 1
                expected_positions.append(expected_positions[-1] + 1)
            else:
                runs.append(1)
                expected_positions.append(0)
        # Zero-length pieces stand for positions the sample touches without a token (an empty
        # sequence, an exhausted one it starts on), as megatron-core's document_lengths do.
        pieces = piece_lengths[row].tolist()
        assert [n for n in pieces if n] == runs
        begin, end = (int(indices.sample_index[int(indices.shuffle_index[i]) + k][0]) for k in (0, 1))
        assert len(pieces) == end - begin + 1
        assert position_ids[row].tolist() == expected_positions
        assert int(piece_lengths[row].sum()) == indices.sample_length


def test_pieces_skip_empty_sequences_and_span_many():
    # L 25 over [3, 0, 0, 4, 0, 30]: sample 0 takes 3 + 4 + 19 tokens from three non-empty sequences.
    lengths = [3, 0, 0, 4, 0, 30]
    indices = sampling.SamplingIndices(
        seq_length=25, add_extra_token=True, num_epochs=1, num_samples=1, separate_final_epoch=False,
        document_index=np.arange(6, dtype=np.int32),
        sample_index=sampling.build_sample_index(np.array(lengths, np.int32), np.arange(6, dtype=np.int32),
                                                 25, 37, True),
        shuffle_index=np.zeros(1, np.uint32))
    ids, offsets, piece_lengths, per_sample = sampling.sample_pieces(indices, np.array(lengths), [0])
    assert ids.tolist() == [0, 3, 5] and offsets.tolist() == [0, 0, 0] and piece_lengths.tolist() == [3, 4, 19]
    assert per_sample.tolist() == [3]


def test_assemble_from_an_indexed_file(tmp_path):
    # Awkward sizes: an empty sequence, one longer than seq_length, a last partial sample dropped.
    lengths = [5, 0, 61, 1, 17, 0, 9]
    sequences = labelled_sequences(lengths)
    with IndexedFileWriter(tmp_path / "data", dtype=np.int32) as writer:
        for tokens in sequences:
            writer.add_document(tokens)
    indexed = IndexedFile.open(tmp_path / "data")
    for extra in (True, False):
        indices = sampling.build_indices(indexed.sequence_lengths, seq_length=16, seed=11, num_samples=9,
                                         add_extra_token=extra)
        got = sampling.assemble_samples(indexed, indices, np.arange(9))
        want = sampling.assemble_samples(ListSource(sequences), indices, np.arange(9))
        assert got.dtype == np.int32 and np.array_equal(got, want)
        assert sampling.assemble_samples(indexed, indices, np.array([], np.int64)).shape == (0, 16 + extra)


# --- the cache ------------------------------------------------------------------------------------

def test_cache_is_written_reused_and_keyed(tmp_path):
    sizes = np.array([30, 0, 12, 50, 7], np.int32)
    params = dict(seq_length=8, seed=3, num_samples=20)
    built = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="a.idx 123 456", **params)
    names = sorted(os.listdir(tmp_path))
    # The meta file and one file of the three arrays (packed: one map at each open).
    assert len(names) == 2 and not any(name.endswith(".tmp") for name in names)
    for name in names:
        if name.endswith(".npy"):
            np.load(tmp_path / name, allow_pickle=False)  # loads without pickle
    reused = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="a.idx 123 456", **params)
    assert isinstance(reused.sample_index, np.memmap)
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(built, name), getattr(reused, name))
        assert getattr(built, name).dtype == getattr(reused, name).dtype
    assert (reused.num_epochs, reused.num_samples, reused.separate_final_epoch) == \
        (built.num_epochs, built.num_samples, built.separate_final_epoch)
    # Another identity, parameter or set of lengths is another entry.
    sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="a.idx 123 999", **params)
    sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="a.idx 123 456", **{**params, "seed": 4})
    sampling.load_or_build_indices(sizes[::-1].copy(), cache_dir=tmp_path, identity="a.idx 123 456", **params)
    assert len(os.listdir(tmp_path)) == 8


def test_damaged_cache_is_rebuilt(tmp_path):
    sizes = np.array([30, 12, 50], np.int32)
    built = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="x", seq_length=8, seed=3)
    (victim,) = [p for p in tmp_path.iterdir() if p.name.endswith("-indices.npy")]
    victim.write_bytes(victim.read_bytes()[:20])
    with pytest.warns(UserWarning, match="damaged; rebuilding"):
        again = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="x", seq_length=8, seed=3)
    assert np.array_equal(again.sample_index, built.sample_index)
    rewritten = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="x", seq_length=8, seed=3)
    assert isinstance(rewritten.sample_index, np.memmap)  # read from the cache written again
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.array_equal(getattr(rewritten, name), getattr(built, name))


def _build_into(cache_dir, barrier):
    barrier.wait()
    sizes = np.random.RandomState(0).randint(0, 400, 20000).astype(np.int32)
    sampling.load_or_build_indices(sizes, cache_dir=cache_dir, identity="race", seq_length=64, seed=9, num_epochs=3)


def test_two_processes_build_the_cache_at_once(tmp_path):
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    workers = [context.Process(target=_build_into, args=(str(tmp_path), barrier)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0]
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))
    sizes = np.random.RandomState(0).randint(0, 400, 20000).astype(np.int32)
    cached = sampling.load_or_build_indices(sizes, cache_dir=tmp_path, identity="race", seq_length=64, seed=9,
                                            num_epochs=3)
    assert isinstance(cached.document_index, np.memmap)
    fresh = sampling.build_indices(sizes, seq_length=64, seed=9, num_epochs=3)
    assert np.array_equal(cached.shuffle_index, fresh.shuffle_index)
    assert np.array_equal(cached.sample_index, fresh.sample_index)


def test_no_cache_dir_builds_in_memory():
    indices = sampling.load_or_build_indices(np.array([40, 3]), cache_dir=None, identity="x", seq_length=8, seed=0)
    assert not isinstance(indices.document_index, np.memmap) and indices.num_samples == (43 - 1) // 8
