"""megatron_rank_stream against Megatron-LM's MegatronPretrainingSampler.

The oracle is Megatron-LM's own class. Megatron-LM's training code is not a dependency, and
``megatron.training`` does not import on Python 3.11 (it uses ``typing.override``), but the
megatron-core 0.19.2 wheel the CI installs ships ``megatron/training/datasets/data_samplers.py``
(its ``MegatronPretrainingSampler`` is identical to Megatron-LM's at ``core_v0.16.1`` and at
the mirror's HEAD). The test reads that installed file and executes only that class's
definition (it uses nothing but builtins), so the order is Megatron's code, not a
re-reading of it.
"""

import ast
import itertools
import pathlib

import numpy as np
import pytest

from mmidx_builder import MMIdx
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import IndexedFileWriter

SEQ_LENGTH = 3


@pytest.fixture(scope="session")
def sampler_class(megatron):
    """``MegatronPretrainingSampler`` from the installed megatron-core wheel's file."""
    import megatron.core

    path = pathlib.Path(megatron.core.__file__).parent.parent / "training" / "datasets" / "data_samplers.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "MegatronPretrainingSampler"]
    assert len(found) == 1, f"{path} does not define MegatronPretrainingSampler"
    namespace = {}
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["MegatronPretrainingSampler"]


def megatron_order(sampler_class, total, consumed, micro_batch_size, rank, world_size):
    """Positions rank ``rank`` trains on, micro-batch by micro-batch, per Megatron-LM."""
    if consumed >= total:
        return []  # the sampler asserts; an exhausted stream yields nothing
    sampler = sampler_class(total_samples=total, consumed_samples=consumed, micro_batch_size=micro_batch_size,
                            data_parallel_rank=rank, data_parallel_size=world_size)
    return [i for batch in sampler for i in batch]


def write_unique_corpus(prefix, rng, documents=40):
    """Every token id is its corpus position: each sample's tokens say which sample it is."""
    start = 0
    with IndexedFileWriter(prefix, dtype=np.uint16) as writer:
        for _ in range(documents):
            n = int(rng.randint(1, 25))
            writer.add_document(np.arange(start, start + n))
            start += n


def load(tmp_path, prefix, **settings):
    settings = {"seq_length": SEQ_LENGTH, "seed": 11, **settings}
    builder = MMIdx(data_files={"train": [prefix + ".bin"]}, cache_dir=str(tmp_path / "hf"), **settings)
    builder.download_and_prepare()
    return builder.as_dataset("train"), builder.as_streaming_dataset("train")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank")
    prefix = str(root / "unique_text_document")
    write_unique_corpus(prefix, np.random.RandomState(0))
    dataset, stream = load(root, prefix, num_shards=7)
    positions = {tuple(row["input_ids"]): i for i, row in enumerate(dataset)}
    assert len(positions) == len(dataset)  # every sample is told apart by its tokens
    return {"prefix": prefix, "root": root, "arrow": dataset, "stream": stream, "positions": positions}


def positions_of(rows, data):
    return [data["positions"][tuple(int(t) for t in np.asarray(row["input_ids"]))] for row in rows]


class FakeWorker:
    def __init__(self, id, num_workers):
        self.id, self.num_workers = id, num_workers


def read_as_workers(ranked, num_workers, monkeypatch, torch):
    """What DataLoader(ranked, batch_size=mbs, num_workers=K) yields, without processes: each
    worker iterates its own copy, the loader takes one micro-batch of each in turn."""
    import copy

    mbs = ranked.micro_batch_size
    per_worker = []
    for w in range(num_workers):
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda w=w: FakeWorker(w, num_workers))
        rows = list(copy.copy(ranked))
        per_worker.append([rows[i:i + mbs] for i in range(0, len(rows), mbs)])
    monkeypatch.undo()
    return [row for batch in round_robin(per_worker) for row in batch]


def round_robin(per_worker):
    """Micro-batches as DataLoader hands them out: one of each worker in turn, skipping the done."""
    return [batch for turn in itertools.zip_longest(*per_worker) for batch in turn if batch is not None]


def boundaries(n, global_batch):
    """consumed_samples at and between global-batch boundaries."""
    return sorted({0, 1, global_batch - 1, global_batch, global_batch + 1, 2 * global_batch, n // 2}
                  & set(range(0, n + 1)))


@pytest.mark.parametrize("source", ["arrow", "stream"])
def test_each_rank_reads_megatron_order_in_process_and_with_workers(source, data, sampler_class, torch, monkeypatch):
    from mmidx_builder import megatron_rank_stream

    dataset = data[source]
    total = len(data["arrow"])
    cases = 0
    for world_size in range(1, 9):
        for mbs in range(1, 5):
            for consumed in boundaries(total, world_size * mbs)[::2 if source == "stream" else 1]:
                for rank in range(world_size):
                    expected = megatron_order(sampler_class, total, consumed, mbs, rank, world_size)
                    ranked = megatron_rank_stream(dataset, rank, world_size, mbs, consumed_samples=consumed)
                    assert list(ranked.sample_positions()) == expected
                    assert len(ranked) == len(expected)
                    label = f"{source} W={world_size} mbs={mbs} consumed={consumed} rank={rank}"
                    if (world_size + mbs + rank) % 3 == 0:  # reading rows is slower; a third of cases
                        assert positions_of(list(ranked), data) == expected, label
                        assert positions_of(read_as_workers(ranked, 2, monkeypatch, torch), data) == expected, label
                    else:
                        per_worker = [ranked.sample_positions(w, 2).reshape(-1, mbs).tolist() for w in range(2)]
                        assert [p for batch in round_robin(per_worker) for p in batch] == expected, label
                    cases += 1
    assert cases > 400


@pytest.mark.parametrize("source", ["arrow", "stream"])
def test_real_dataloader_workers_keep_megatron_order(source, data, sampler_class, torch):
    from torch.utils.data import DataLoader

    from mmidx_builder import megatron_rank_stream

    total = len(data["arrow"])
    for world_size, mbs, consumed in ((3, 2, 7), (8, 1, 0), (1, 4, 4)):
        for rank in sorted({0, world_size - 1}):
            ranked = megatron_rank_stream(data[source], rank, world_size, mbs, consumed_samples=consumed)
            for workers in (0, 2):
                loader = DataLoader(ranked, batch_size=mbs, num_workers=workers, collate_fn=list)
                batches = list(loader)
                assert all(len(b) == mbs for b in batches)
                got = positions_of([row for b in batches for row in b], data)
                assert got == megatron_order(sampler_class, total, consumed, mbs, rank, world_size), \
                    f"{source} W={world_size} mbs={mbs} consumed={consumed} rank={rank} workers={workers}"


def test_fewer_samples_than_a_global_batch_gives_every_rank_the_same_count(data, tmp_path, sampler_class, torch):
    """num_samples=6 on 4 ranks: no rank may get a micro-batch while another gets none (DDP hang)."""
    from torch.utils.data import DataLoader

    from mmidx_builder import megatron_rank_stream

    dataset, stream = load(tmp_path, data["prefix"], num_samples=6)
    for mbs, expected_batches in ((1, 1), (2, 0)):
        counts = []
        for rank in range(4):
            ranked = megatron_rank_stream(stream, rank, 4, mbs)
            batches = list(DataLoader(ranked, batch_size=mbs, num_workers=2, collate_fn=list))
            counts.append(len(batches))
            assert sum(len(b) for b in batches) == len(megatron_order(sampler_class, 6, 0, mbs, rank, 4))
        assert counts == [expected_batches] * 4


def test_builder_stream_reads_only_this_ranks_samples(data, torch):
    from mmidx_builder import megatron_rank_stream

    ranked = megatron_rank_stream(data["stream"], 1, 3, 2, consumed_samples=5)
    reader = ranked._rows
    assert type(reader).__name__ == "_BuilderRows"  # the fast path is taken for our builder's streams
    asked = []
    split = reader.split  # hf/streams.py's BuilderStream: the rows asked of the builder

    class Spy:
        num_rows = split.num_rows

        def tables(self, range_batches):
            def seen():
                for ranges in range_batches:
                    asked.extend(ranges)
                    yield ranges
            return split.tables(seen())

    reader.split = Spy()
    rows = list(ranked)
    requested = [p for a, b in asked for p in range(a, b)]
    assert requested == list(ranked.sample_positions()) == positions_of(rows, data)


def test_formats_are_kept(data, torch):
    from mmidx_builder import megatron_rank_stream

    import pyarrow as pa

    for source in ("arrow", "stream"):
        for name, kind in (("numpy", np.ndarray), ("torch", torch.Tensor), ("arrow", pa.Table)):
            row = next(iter(megatron_rank_stream(data[source].with_format(name), 0, 2, 2)))
            assert isinstance(row if name == "arrow" else row["input_ids"], kind), (source, name)
        row = next(iter(megatron_rank_stream(data[source], 0, 2, 2)))
        assert isinstance(row["input_ids"], list)


def test_generic_streams_are_followed_too(data, sampler_class, torch):
    """A stream after map() is not our builder's table generator: read in order, same rows."""
    from mmidx_builder import megatron_rank_stream

    mapped = data["stream"].map(lambda row: row)
    ranked = megatron_rank_stream(mapped, 2, 3, 2, consumed_samples=3)
    assert type(ranked._rows).__name__ == "_StreamRows"
    total = len(data["arrow"])
    assert positions_of(list(ranked), data) == megatron_order(sampler_class, total, 3, 2, 2, 3)


def test_resume_on_another_world_size_continues_from_the_same_global_sample(data, sampler_class, torch):
    from mmidx_builder import megatron_rank_stream

    total = len(data["arrow"])
    for source in ("arrow", "stream"):
        before = [megatron_rank_stream(data[source], r, 2, 2) for r in range(2)]
        seen = []
        for ranked in before:  # 5 steps of 2 ranks x 2 samples, in one process
            rows = list(itertools.islice(iter(ranked), 5 * 2))
            seen.extend(positions_of(rows, data))
        states = [ranked.state_dict() for ranked in before]
        assert {s["consumed_samples"] for s in states} == {5 * 2 * 2}
        for world_size, mbs in ((4, 1), (3, 3), (1, 2)):
            after = []
            for rank in range(world_size):
                ranked = megatron_rank_stream(data[source], rank, world_size, mbs)
                ranked.load_state_dict(states[0])
                rows = list(ranked)
                assert positions_of(rows, data) == megatron_order(sampler_class, total, 20, mbs, rank, world_size)
                after.extend(positions_of(rows, data))
            assert not set(seen) & set(after)  # nothing twice
            gb = world_size * mbs
            assert sorted(seen + after) == list(range(20 + (total - 20) // gb * gb))  # nothing lost but the tail


def test_worker_states_combine_into_the_global_count(data, sampler_class, torch, monkeypatch):
    """With K workers each worker counts its own micro-batches (what StatefulDataLoader keeps);
    a new stream of another world size continues from their combined global count."""
    import copy

    from mmidx_builder import megatron_rank_stream

    total = len(data["arrow"])
    ranked = megatron_rank_stream(data["stream"], 0, 2, 2, consumed_samples=4)
    delivered = 5  # the loader handed out micro-batches 0..4: workers 0, 1, 0, 1, 0
    states = []
    for w in range(2):
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda w=w: FakeWorker(w, 2))
        copy_ = copy.copy(ranked)
        mine = len(range(w, delivered, 2))
        list(itertools.islice(iter(copy_), mine * 2))
        states.append(copy_.state_dict())
        assert states[-1]["consumed_samples"] is None and states[-1]["worker"]["micro_batches"] == mine
    monkeypatch.undo()
    fresh = megatron_rank_stream(data["stream"], 1, 3, 1)
    fresh.load_state_dict({"_snapshot": {"_worker_snapshots": {f"worker_{i}": {"dataset_state": s}
                                                               for i, s in enumerate(states)}}})
    assert fresh.consumed_samples == 4 + delivered * 4
    assert list(fresh.sample_positions()) == megatron_order(sampler_class, total, 24, 1, 1, 3)
    with pytest.raises(ParameterError, match="all 2 workers"):
        fresh.load_state_dict(states[:1])
    # Inside worker 1 of 2 again (StatefulDataLoader restoring the same loader): its own next batch.
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: FakeWorker(1, 2))
    again = megatron_rank_stream(data["stream"], 0, 2, 2)
    again.load_state_dict(states[1])
    assert positions_of(list(itertools.islice(iter(again), 2)), data) == \
        megatron_order(sampler_class, total, 4, 2, 0, 2)[5 * 2:6 * 2]  # worker 1 delivered g = 1, 3: next is g = 5
    monkeypatch.undo()


@pytest.mark.parametrize("setting", [{"seed": 12}, {"seq_length": 4}, {"num_epochs": 2}, {"add_extra_token": False}])
def test_a_state_of_other_settings_is_refused(setting, data, tmp_path, torch):
    from mmidx_builder import megatron_rank_stream

    ranked = megatron_rank_stream(data["stream"], 0, 2, 2)
    list(itertools.islice(iter(ranked), 4))
    state = ranked.state_dict()
    dataset, stream = load(tmp_path, data["prefix"], **setting)
    for other in (dataset, stream):
        with pytest.raises(ParameterError, match=next(iter(setting))):
            megatron_rank_stream(other, 0, 2, 2).load_state_dict(state)


def test_a_state_of_other_files_is_refused(data, tmp_path, torch):
    from mmidx_builder import megatron_rank_stream

    prefix = str(tmp_path / "other_text_document")
    write_unique_corpus(prefix, np.random.RandomState(1))
    _, stream = load(tmp_path, prefix)
    state = megatron_rank_stream(data["stream"], 0, 1, 1).state_dict()
    with pytest.raises(ParameterError, match="files|lengths_sha256|num_tokens"):
        megatron_rank_stream(stream, 0, 1, 1).load_state_dict(state)


def test_bad_arguments_are_refused(data, torch):
    from datasets.distributed import split_dataset_by_node

    from mmidx_builder import megatron_rank_stream

    with pytest.raises(ParameterError, match="rank must lie"):
        megatron_rank_stream(data["arrow"], 2, 2, 1)
    with pytest.raises(ParameterError, match="micro_batch_size= must be at least 1, got 0"):
        megatron_rank_stream(data["arrow"], 0, 2, 0)
    with pytest.raises(ParameterError, match="exceeds"):
        megatron_rank_stream(data["arrow"], 0, 2, 1, consumed_samples=len(data["arrow"]) + 1)
    with pytest.raises(ParameterError, match="split_dataset_by_node"):
        megatron_rank_stream(split_dataset_by_node(data["stream"], rank=0, world_size=2), 0, 2, 1)
    with pytest.raises(ParameterError, match="Dataset or IterableDataset"):
        megatron_rank_stream([1, 2, 3], 0, 1, 1)
    with pytest.raises(ParameterError, match="not a megatron_rank_stream state"):
        megatron_rank_stream(data["arrow"], 0, 1, 1).load_state_dict({"examples_iterable": {}})


def test_plain_iterable_dataset_state_dict_still_resumes(data):
    stream = data["stream"]
    iterator = iter(stream)
    head = [next(iterator) for _ in range(9)]
    state = stream.state_dict()
    resumed = type(stream)(stream._ex_iterable, info=stream.info, split=stream.split)
    resumed.load_state_dict(state)
    assert positions_of(head + list(resumed), data) == list(range(len(data["arrow"])))


@pytest.mark.parametrize("workers", [0, 2])
def test_torchdata_stateful_dataloader_resumes_and_feeds_elastic_resume(workers, data, sampler_class, torch):
    """torchdata's StatefulDataLoader (optional: scripts/install_training_test_deps.sh) snapshots
    each worker's count; its state resumes the same loader exactly and gives the global count."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    from mmidx_builder import megatron_rank_stream

    def loader(ranked):
        return stateful.StatefulDataLoader(ranked, batch_size=2, num_workers=workers, collate_fn=list)

    total = len(data["arrow"])
    first = loader(megatron_rank_stream(data["stream"], 1, 2, 2))
    it = iter(first)
    head = [row for _ in range(5) for row in next(it)]
    state = first.state_dict()
    del it
    again = loader(megatron_rank_stream(data["stream"], 1, 2, 2))
    again.load_state_dict(state)
    rest = [row for batch in again for row in batch]
    assert positions_of(head + rest, data) == megatron_order(sampler_class, total, 0, 2, 1, 2)
    elastic = megatron_rank_stream(data["stream"], 2, 3, 1)
    elastic.load_state_dict(state)
    assert elastic.consumed_samples == 5 * 2 * 2


def test_document_structure_rows_through_the_rank_stream(data, tmp_path, torch):
    from mmidx_builder import megatron_rank_stream

    dataset, stream = load(tmp_path, data["prefix"], document_structure=True)
    via_stream = list(megatron_rank_stream(stream, 1, 2, 3, consumed_samples=2))
    via_arrow = list(megatron_rank_stream(dataset, 1, 2, 3, consumed_samples=2))
    assert via_stream == via_arrow and len(via_stream) > 10
    assert all(sum(row["piece_lengths"]) == SEQ_LENGTH + 1 for row in via_stream)


@pytest.mark.parametrize("source", ["arrow", "stream"])
def test_a_loader_batch_size_other_than_the_micro_batch_is_refused_with_workers(source, data, sampler_class, torch,
                                                                               quick_worker_shutdown):
    """DataLoader(batch_size=4, num_workers=2) over a stream of micro_batch_size=2 takes each
    batch of 4 from one worker: micro-batches 0, 2 then 1, 3, out of Megatron's order. It is
    refused, naming the batch_size to use; without workers any batch size keeps the order."""
    from torch.utils.data import DataLoader

    from mmidx_builder import megatron_rank_stream

    total = len(data["arrow"])
    ranked = megatron_rank_stream(data[source], 0, 2, 2)
    expected = megatron_order(sampler_class, total, 0, 2, 0, 2)
    for batch_size in (4, 3, 1, None):
        loader = DataLoader(ranked, batch_size=batch_size, num_workers=2, collate_fn=list if batch_size else None)
        with pytest.raises(ParameterError, match=r"use batch_size=2"):
            list(loader)
    for workers in (0, 1):
        batches = list(DataLoader(ranked, batch_size=4, num_workers=workers, collate_fn=list))
        assert positions_of([row for b in batches for row in b], data) == expected
    batches = list(DataLoader(ranked, batch_size=2, num_workers=2, collate_fn=list))
    assert positions_of([row for b in batches for row in b], data) == expected


def test_a_megatron_state_is_refused_on_other_files_of_the_same_name_or_another_split_range(tmp_path, torch):
    """The Megatron kind's fingerprint held the files' base names and the split ratio only: a
    state of x/a_text_document loaded into a stream of y/a_text_document (other content), and a
    validation state moved between split strings 90,10,0 and 85,10,5 (the same ratio, another
    range of sequences)."""
    from datasets import load_dataset

    from mmidx_builder import megatron_rank_stream

    for folder, seed in (("x", 0), ("y", 1)):
        (tmp_path / folder).mkdir()
        write_unique_corpus(str(tmp_path / folder / "a_text_document"), np.random.RandomState(seed), documents=200)

    def stream(folder, split_ratios, split):
        return load_dataset("mmidx", data_path=[str(tmp_path / folder / "a_text_document")], split_ratios=split_ratios,
                            seq_length=SEQ_LENGTH, seed=3, split=split, streaming=True)

    def state(dataset):
        ranked = megatron_rank_stream(dataset, 0, 1, 2)
        list(itertools.islice(iter(ranked), 4))
        return ranked.state_dict()

    saved = state(stream("x", "90,10,0", "train"))
    megatron_rank_stream(stream("x", "90,10,0", "train"), 0, 2, 1).load_state_dict(saved)  # the same: loads
    with pytest.raises(ParameterError, match="lengths_sha256|num_tokens|num_sequences"):
        megatron_rank_stream(stream("y", "90,10,0", "train"), 0, 1, 2).load_state_dict(saved)
    validation = state(stream("x", "90,10,0", "validation"))
    with pytest.raises(ParameterError, match="sequence_range"):
        megatron_rank_stream(stream("x", "85,10,5", "validation"), 0, 1, 2).load_state_dict(validation)


def test_every_kind_records_the_fingerprint_of_its_sources(tmp_path, torch):
    """One fingerprint function for every kind: the rank stream's fingerprint of a stream of
    .bin/.idx pairs, a Megatron blend, raw chunks and fairseq pairs holds sequence and token
    counts and a hash of the lengths."""
    from datasets import load_dataset

    from mmidx_builder import megatron_rank_stream
    from mmidx_builder.sources.indexed import write_documents

    prefix = str(tmp_path / "a_text_document")
    write_unique_corpus(prefix, np.random.RandomState(4), documents=60)
    write_unique_corpus(prefix + "_copy", np.random.RandomState(5), documents=60)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "one.dat").write_bytes(bytes(range(200)))
    pairs = tmp_path / "data-bin"
    pairs.mkdir()
    for side in ("de", "en"):
        write_documents(pairs / f"train.de-en.{side}", [[5, 6, 2], [7, 2]] * 5, dtype=np.int32, flavour="fairseq")
    streams = {
        "pairs": load_dataset(str(tmp_path), data_files={"train": prefix + ".bin"}, seq_length=SEQ_LENGTH,
                              split="train", streaming=True),
        "megatron": load_dataset("mmidx", data_path=["0.5", prefix, "0.5", prefix + "_copy"], split_ratios="1",
                                 num_samples=50, seq_length=SEQ_LENGTH, split="train", streaming=True),
        "raw chunks": load_dataset("mmidx", data_files={"train": str(raw / "*.dat")}, n_bytes=1, seq_length=16,
                                   style="diff", split="train", streaming=True),
        "fairseq": load_dataset("mmidx", data_files={"train": str(pairs / "*.bin")}, split="train", streaming=True),
    }
    for kind, dataset in streams.items():
        fingerprint = megatron_rank_stream(dataset, 0, 1, 1).fingerprint
        parts = fingerprint.get("sources") or [fingerprint]
        assert all({"num_sequences", "num_tokens", "lengths_sha256"} <= set(part) for part in parts), kind
    assert len(megatron_rank_stream(streams["megatron"], 0, 1, 1).fingerprint["sources"]) == 2


# --- tampered or damaged resume states: every field checked (training/state.py) ---------------------

def _states(data, torch, monkeypatch):
    """A global state and the two worker states of a rank stream read with 2 workers."""
    import copy

    from mmidx_builder import megatron_rank_stream

    ranked = megatron_rank_stream(data["stream"], 0, 2, 2)
    list(itertools.islice(iter(ranked), 4))
    workers = []
    for w in range(2):
        monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda w=w: FakeWorker(w, 2))
        copy_ = copy.copy(ranked)
        list(itertools.islice(iter(copy_), 2))
        workers.append(copy_.state_dict())
    monkeypatch.undo()
    return ranked.state_dict(), workers


def _worker_field(name, value):
    def edit(state, workers):
        workers[0]["worker"][name] = value
        return workers
    return edit


def _field(name, value):
    def edit(state, workers):
        state[name] = value
        return state
    return edit


def _fingerprint_without(key):
    def edit(state, workers):
        del state["fingerprint"][key]
        return state
    return edit


TAMPERED = {  # the issue's cases, and the other fields' equivalents: (edit, what the message names)
    "worker micro_batches negative": (_worker_field("micro_batches", -3), r"worker\.micro_batches is -3"),
    "worker iteration_start negative": (_worker_field("iteration_start", -40), r"worker\.iteration_start is -40"),
    "worker micro_batches a float": (_worker_field("micro_batches", 1.5), r"worker\.micro_batches is 1\.5"),
    "worker micro_batches past the dataset": (_worker_field("micro_batches", 10**6), r"worker 0 of 2 has \d+ batches"),
    "worker id past the workers": (_worker_field("id", 2), r"worker\.id is 2.*of 2 workers"),
    "worker num_workers zero": (_worker_field("num_workers", 0), r"worker\.num_workers is 0"),
    "worker a string": (lambda s, w: [{**w[0], "worker": "0"}, w[1]], r"worker is '0', expected a mapping"),
    "world_size zero": (_field("world_size", 0), r"world_size is 0, expected a whole number of at least 1"),
    "micro_batch_size a string": (_field("micro_batch_size", "2"), r"micro_batch_size is '2'"),
    "consumed_samples a float": (_field("consumed_samples", 4.0), r"consumed_samples is 4\.0"),
    "consumed_samples None without a worker": (_field("consumed_samples", None), r"consumed_samples is None"),
    "consumed_samples a bool": (_field("consumed_samples", True), r"consumed_samples is True"),
    "version a bool": (_field("version", True), r"version is True, expected 1"),
    "fingerprint empty": (_field("fingerprint", {}), r"fingerprint lacks .*rows"),
    "fingerprint a string": (_field("fingerprint", "abc"), r"fingerprint is 'abc', expected a mapping"),
    "fingerprint removed": (lambda s, w: {k: v for k, v in s.items() if k != "fingerprint"},
                            r"fingerprint is None, expected a mapping"),
    "fingerprint without its row count": (_fingerprint_without("rows"), r"fingerprint lacks rows \(this dataset's: "
                                                                         r"rows=\d+\)"),
    # checked as a whole (issue 42): each field possible, together impossible
    "worker counts no loader leaves": (lambda s, w: [{**w[0], "worker": {**w[0]["worker"], "micro_batches": 15}},
                                                     {**w[1], "worker": {**w[1]["worker"], "micro_batches": 0}}],
                                       r"counts of batches \[15, 0\] are not what a DataLoader leaves.*after 15 "
                                       r"batches they have made \[8, 7\]"),
    "worker counts in the wrong order": (lambda s, w: [{**w[0], "worker": {**w[0]["worker"], "micro_batches": 0}},
                                                       {**w[1], "worker": {**w[1]["worker"], "micro_batches": 1}}],
                                         r"counts of batches \[0, 1\]"),
    "unit_samples not a micro-batch of every rank": (
        lambda s, w: [{**x, "worker": {**x["worker"], "unit_samples": 7}} for x in w],
        r"worker\.unit_samples is 7, but its world_size 2 x micro_batch_size 2 = 4"),
    "two global states": (lambda s, w: {"a": s, "b": {**s, "consumed_samples": 12}},
                          r"2 global states in one container \(consumed_samples 8, 12\)"),
    "a global state beside worker states": (lambda s, w: [s, *w], r"a global state .* beside 2 worker states"),
    "a worker's state twice": (lambda s, w: [w[0], w[0], w[1]], r"worker 0's state appears 2 times"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_state_is_refused_naming_the_field(case, data, torch, monkeypatch):
    import copy

    from mmidx_builder import megatron_rank_stream

    state, workers = _states(data, torch, monkeypatch)
    edit, message = TAMPERED[case]
    tampered = edit(copy.deepcopy(state), copy.deepcopy(workers))
    for source in ("arrow", "stream"):
        fresh = megatron_rank_stream(data[source], 1, 3, 1)
        with pytest.raises(ParameterError, match=message):
            fresh.load_state_dict(tampered)
        assert fresh.consumed_samples == 0  # nothing half-loaded


def test_the_untampered_states_load(data, sampler_class, torch, monkeypatch):
    """The control of the test above: the same states, unedited, load to the right count."""
    from mmidx_builder import megatron_rank_stream

    state, workers = _states(data, torch, monkeypatch)
    fresh = megatron_rank_stream(data["arrow"], 1, 3, 1)
    fresh.load_state_dict(state)
    assert fresh.consumed_samples == 2 * 2 * 2
    fresh.load_state_dict(workers)  # each worker handed out one micro-batch: 2 global batches
    assert fresh.consumed_samples == 2 * 2 * 2


def test_split_dataset_by_node_on_a_stream_of_samples_warns_it_is_not_megatrons_order(data, sampler_class):
    """datasets deals a split stream by shards or every n-th sample: disjoint and complete, so
    nothing else says it is not MegatronPretrainingSampler's split; the stream says so."""
    import warnings

    from datasets.distributed import split_dataset_by_node

    total = len(data["arrow"])
    for world_size in (2, 3):  # 7 shards: every n-th sample for both
        with pytest.warns(UserWarning, match=rf"split_dataset_by_node\(rank=1, world_size={world_size}\).*not "
                                             r"Megatron's per-rank.*megatron_rank_stream"):
            rows = list(split_dataset_by_node(data["stream"], rank=1, world_size=world_size))
        assert positions_of(rows, data) == list(range(1, total, world_size))  # what datasets gives: round robin
        megatron = megatron_order(sampler_class, total, 0, 2, 1, world_size)  # micro-batches of 2
        assert positions_of(rows, data)[:len(megatron)] != megatron
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the whole stream: no warning
        assert len(list(data["stream"])) == total


def test_the_split_dataset_by_node_warning_comes_once_per_process(data):
    """Every warnings.catch_warnings() (torch, transformers, accelerate enter them around their
    calls) empties Python's record of warnings shown: the warning came again at each shard read."""
    import warnings

    from datasets.distributed import split_dataset_by_node

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in split_dataset_by_node(data["stream"], rank=1, world_size=2):
            with warnings.catch_warnings():  # what a training loop's libraries do between rows
                pass
        assert len(list(split_dataset_by_node(data["stream"], rank=1, world_size=2))) > 7  # read again: 7 shards
    said = [w for w in caught if "split_dataset_by_node(rank=1" in str(w.message)]
    assert len(said) == 1, [str(w.message)[:60] for w in said]
