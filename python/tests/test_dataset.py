"""weft.torch datasets: batched reads, prefetch, DataLoader with workers."""

import hashlib
import os
import random

import numpy as np
import pytest
import torch

import weft.torch as wt


def content(i: int, size: int) -> bytes:
    head = i.to_bytes(4, "little")
    rnd = random.Random(i).randbytes(max(0, size - 4))
    return (head + rnd)[:size]


@pytest.fixture(scope="module")
def files(client):
    root = "/t/dataset-files"
    if client.exists(root):
        client.rmtree(root)
    sizes = {}
    for i in range(60):
        size = 4 + (i * 7919) % 300000
        if i == 7:
            size = 1500000  # spans two chunks
        p = f"{root}/d{i % 4}/f{i:03d}.bin"
        client.makedirs(os.path.dirname(p), exist_ok=True)
        client.write_file(p, content(i, size))
        sizes[p] = (i, size)
    return root, sizes


def collate(batch):
    return batch


def test_file_dataset_items(client, files):
    root, sizes = files
    ds = wt.FileDataset(root, client=client)
    assert len(ds) == len(sizes)
    assert ds.paths == sorted(sizes)
    for k in (0, 7, len(ds) - 1):
        i, size = sizes[ds.paths[k]]
        assert ds[k].tobytes() == content(i, size)
    got = ds.__getitems__([3, 1, 7])
    for k, a in zip([3, 1, 7], got):
        i, size = sizes[ds.paths[k]]
        assert a.tobytes() == content(i, size)
    with pytest.raises(IndexError):
        ds[len(ds)]
    ds_bytes = wt.FileDataset(root, client=client, output="bytes", transform=lambda b: b[:4])
    assert ds_bytes[0] == content(*sizes[ds.paths[0]])[:4]


def test_prefetch_single_process(client, files):
    root, sizes = files
    ds = wt.FileDataset(root, client=client, transform=lambda a: hashlib.sha1(a).hexdigest())
    loader = wt.DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate)
    seen = []
    for batch in loader:
        seen += batch
    want = sorted(hashlib.sha1(content(i, s)).hexdigest() for i, s in sizes.values())
    assert sorted(seen) == want
    assert ds._state().executor is not None  # prefetch was used


def test_a_loop_that_stops_early_leaves_no_prefetched_batch_behind(client, files):
    # Prefetched batches hold their buffers: a loop that breaks off (or an
    # iterator dropped part way) gives them back instead of keeping them
    # until the dataset goes.
    import gc
    root, _ = files
    ds = wt.FileDataset(root, client=client)
    loader = wt.DataLoader(ds, batch_size=8, shuffle=True, collate_fn=collate)
    for _ in loader:
        assert len(ds._state().pending) == 1, "the next batch is prefetched"
        break
    gc.collect()
    assert len(ds._state().pending) == 0
    it = iter(loader)
    assert len(it) == len(loader)
    next(it)
    del it
    gc.collect()
    assert len(ds._state().pending) == 0
    # A finalizer run while this thread holds the dataset's lock (as inside
    # __getitems__) does not wait for it.
    it = iter(loader)
    next(it)
    cycle = [it]
    cycle.append(cycle)
    del it, cycle
    with ds._state().lock:
        gc.collect()
    assert sum(len(b) for b in loader) == len(ds), "a full pass after it reads every sample"


def test_dataloader_sampler_and_generator(client, files):
    # The loader's sampler is the one batches come from (it used to be a
    # SequentialSampler torch made, so loader.sampler.set_epoch failed), and
    # the generator reaches torch's DataLoader (workers' base seed).
    from torch.utils.data.distributed import DistributedSampler

    root, sizes = files
    ds = wt.FileDataset(root, client=client, transform=first_word)
    sampler = DistributedSampler(ds, num_replicas=2, rank=0, shuffle=True, seed=5)
    loader = wt.DataLoader(ds, batch_size=4, sampler=sampler, collate_fn=collate)
    assert loader.sampler is sampler and isinstance(loader, torch.utils.data.DataLoader)
    orders = []
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        order = [x[0] for b in loader for x in b]
        assert order == [sizes[ds.paths[k]][0] for k in sampler], epoch
        assert len(order) == len(ds) // 2
        orders.append(order)
    assert orders[0] != orders[1]  # set_epoch reshuffled
    assert len(loader) == (len(ds) // 2 + 3) // 4

    def run(seed):
        g = torch.Generator().manual_seed(seed)
        loader = wt.DataLoader(ds, batch_size=4, shuffle=True, generator=g, collate_fn=collate)
        assert loader.generator is g and isinstance(loader.sampler, torch.utils.data.RandomSampler)
        return [x[0] for b in loader for x in b]

    assert run(1) == run(1) and run(1) != run(2)
    with pytest.raises(ValueError):
        wt.DataLoader(ds, shuffle=True, sampler=sampler)


def first_word(a):
    return int.from_bytes(a[:4].tobytes(), "little"), hashlib.sha1(a).hexdigest(), len(a)


@pytest.mark.parametrize("persistent", [False, True])
def test_dataloader_two_workers_exactly_once(client, files, persistent):
    root, sizes = files
    ds = wt.FileDataset(root, client=client, transform=first_word)
    loader = wt.DataLoader(ds, batch_size=5, shuffle=True, num_workers=2, collate_fn=collate,
                           persistent_workers=persistent)
    want = sorted((i, hashlib.sha1(content(i, s)).hexdigest(), s) for i, s in sizes.values())
    for epoch in range(2):
        seen = []
        for batch in loader:
            seen += batch
        assert sorted(seen) == want, f"epoch {epoch}"


def test_plain_dataloader_uses_getitems(client, files):
    root, sizes = files
    ds = wt.FileDataset(root, client=client, transform=first_word)
    loader = torch.utils.data.DataLoader(ds, batch_size=7, num_workers=2, collate_fn=collate)
    seen = [x for b in loader for x in b]
    assert sorted(x[0] for x in seen) == sorted(i for i, _ in sizes.values())


def test_shard_dataset(client, root):
    records, blob = [], bytearray()
    for i in range(200):
        rec = content(i, 100 + (i * 37) % 5000)
        records.append((f"{root}/shard{i % 3}", None, rec))
    shards = {}
    for p, _, rec in records:
        shards.setdefault(p, bytearray())
    recs = []
    for p, _, rec in records:
        recs.append((p, len(shards[p]), len(rec)))
        shards[p] += rec
    for p, b in shards.items():
        client.write_file(p, b)
    ds = wt.ShardDataset(recs, client=client, output="tensor")
    assert len(ds) == 200
    assert isinstance(ds[0], torch.Tensor)
    loader = wt.DataLoader(ds, batch_size=16, shuffle=True, num_workers=2, collate_fn=collate)
    got = {}
    for batch in loader:
        for t in batch:
            a = t.numpy()
            got[int.from_bytes(a[:4].tobytes(), "little")] = a.tobytes()
    assert len(got) == 200
    for i, (_, _, rec) in enumerate(records):
        assert got[i] == rec
    with pytest.raises(ValueError):
        wt.ShardDataset([(f"{root}/shard0", 0, 10**9)], client=client)
    with pytest.raises(FileNotFoundError):
        wt.ShardDataset([(f"{root}/none", 0, 1)], client=client)
    assert np  # silence unused import


def test_file_dataset_reads_a_symlinked_file_as_the_file_it_names(client, root):
    client.makedirs(f"{root}/ds/inner")
    client.makedirs(f"{root}/elsewhere")
    client.write_file(f"{root}/ds/a.bin", b"a" * 10)
    client.write_file(f"{root}/elsewhere/b.bin", b"b" * 3000)
    client.write_file(f"{root}/elsewhere/c.bin", b"c")
    client.symlink(f"{root}/elsewhere/b.bin", f"{root}/ds/b.bin")
    client.symlink(f"{root}/elsewhere", f"{root}/ds/linked-dir")  # not entered, as os.walk
    client.symlink("gone", f"{root}/ds/dangling.bin")
    ds = wt.FileDataset(f"{root}/ds", client=client, output="bytes")
    assert ds.paths == [f"{root}/ds/a.bin", f"{root}/ds/b.bin"]
    assert ds[1] == b"b" * 3000


def test_datasets_pickle_and_load_in_spawned_workers(client, files):
    """DataLoader workers started by spawn or forkserver get the dataset by
    pickle: its native Inodes go along, and read (and check) as before."""
    import pickle

    root, sizes = files
    ds = wt.FileDataset(root, client=client, transform=first_word)
    copy = pickle.loads(pickle.dumps(ds))
    assert [copy[k] for k in (0, 7)] == [ds[k] for k in (0, 7)]
    n = client.inode(ds.paths[7])
    m = pickle.loads(pickle.dumps(n))
    assert (m.ino, m.type, m.mode, m.uid, m.gid, m.size, m.mtime_ns, m.layout) == \
        (n.ino, n.type, n.mode, n.uid, n.gid, n.size, n.mtime_ns, n.layout)
    loader = wt.DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate, multiprocessing_context="spawn")
    seen = [x for b in loader for x in b]
    want = sorted((i, hashlib.sha1(content(i, s)).hexdigest(), s) for i, s in sizes.values())
    assert sorted(seen) == want
