"""weft.torch: PyTorch datasets and checkpoints on a Weft cluster.

Datasets (map-style; each DataLoader batch is one batched read):
    ds = weft.torch.FileDataset("/data/train", transform=decode)
    loader = weft.torch.DataLoader(ds, batch_size=64, shuffle=True, num_workers=4)

    FileDataset: one sample per file under a directory (its bytes).
    ShardDataset: one sample per (path, offset, length) record inside shard files.

  Both implement __getitems__ (torch's DataLoader calls it with a batch's
  indices) and prefetch: with weft.torch.DataLoader (or PrefetchBatchSampler)
  every batch carries the batches that follow it, and the process that reads
  a batch starts reading its own next batch in the background.

Checkpoints:
    weft.torch.save(model.state_dict(), "/ckpt/step-1000")
    state = weft.torch.load("/ckpt/step-1000")

  save writes every tensor's bytes into one data file at aligned offsets with
  a pool of native writes, then a manifest; it is durable when it returns. A
  checkpoint directory appears complete or not at all (built in a hidden
  sibling, published by rename; an existing one is replaced by an atomic
  exchange, then removed: only a checkpoint or an empty directory, anything
  else raises FileExistsError). The hidden sibling of a killed save is
  removed by the next save of the same path once its process is gone (same
  host) or it is a day old. load runs no code named by the checkpoint unless
  given weights_only=False.
"""

from __future__ import annotations

import collections
import concurrent.futures as _futures
import errno
import hashlib
import io
import logging
import operator
import os
import pickle
import socket
import stat
import sys
import threading
import time
import uuid

import numpy as np
import torch
import torch.utils.data as _data

import weft as _weft

__all__ = ["FileDataset", "ShardDataset", "PrefetchBatchSampler", "DataLoader", "save", "load"]

_log = logging.getLogger("weft.torch")

_default = None
_default_lock = threading.Lock()


def default_client() -> "_weft.Client":
    """The client weft.torch uses when none is given (weft.connect())."""
    global _default
    with _default_lock:
        if _default is None:
            _default = _weft.connect()
        return _default


def _reset_after_fork():
    global _default_lock
    _default_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


def _client(client):
    return client if client is not None else default_client()


# ---------------------------------------------------------------------------
# Datasets


class PlannedBatch(list):
    """A batch of indices that also carries the batches after it (`upcoming`),
    so that the process reading it can prefetch its own next batch."""

    __slots__ = ("upcoming",)

    def __init__(self, indices, upcoming=()):
        super().__init__(indices)
        self.upcoming = list(upcoming)

    def __reduce__(self):
        return (PlannedBatch, (list(self), self.upcoming))


class PrefetchBatchSampler(_data.Sampler):
    """A batch sampler (like torch's BatchSampler) whose batches carry the
    `lookahead` batches that follow them; set lookahead >= num_workers (the
    DataLoader deals batches to workers round-robin: a worker's next batch is
    num_workers batches later)."""

    def __init__(self, sampler, batch_size: int, drop_last: bool = False, lookahead: int = 1):
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.lookahead = max(1, lookahead)

    def __iter__(self):
        batches = iter(_data.BatchSampler(self.sampler, self.batch_size, self.drop_last))
        window = collections.deque()
        for b in batches:
            window.append(b)
            if len(window) > self.lookahead:
                first = window.popleft()
                yield PlannedBatch(first, list(window))
        while window:
            first = window.popleft()
            yield PlannedBatch(first, list(window))

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size


class DataLoader(_data.DataLoader):
    """torch.utils.data.DataLoader with a PrefetchBatchSampler (so that weft
    datasets prefetch); other keyword arguments go to DataLoader.

    `sampler` (or the RandomSampler / SequentialSampler made from `shuffle`)
    is the loader's `sampler`, as with torch's DataLoader (so that
    loader.sampler.set_epoch(epoch) reaches a DistributedSampler); `generator`
    goes to the RandomSampler and to DataLoader (workers' base seed)."""

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False, sampler=None, drop_last: bool = False,
                 num_workers: int = 0, generator=None, **kwargs):
        if sampler is None:
            sampler = (_data.RandomSampler(dataset, generator=generator) if shuffle
                       else _data.SequentialSampler(dataset))
        elif shuffle:
            raise ValueError("sampler and shuffle exclude each other")
        batch_sampler = PrefetchBatchSampler(sampler, batch_size, drop_last, lookahead=max(1, num_workers))
        super().__init__(dataset, batch_sampler=batch_sampler, num_workers=num_workers, generator=generator,
                         **kwargs)
        # A batch_sampler makes torch's DataLoader build a SequentialSampler
        # of its own, which nothing iterates (and DataLoader refuses a new
        # value once built): the sampler batches come from is the one shown.
        object.__setattr__(self, "sampler", sampler)

    def __iter__(self):
        return _LoaderIter(super().__iter__(), self.dataset)


class _LoaderIter:
    """torch's DataLoader iterator (len(), its attributes), which gives the
    dataset's prefetched batches back when it ends or is dropped part way (a
    loop that breaks off, an exception): they hold their buffers."""

    def __init__(self, it, dataset):
        self._it = it
        self._dataset = dataset

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self._it)
        except StopIteration:
            self._release()
            raise

    def __len__(self):
        return len(self._it)

    def __getattr__(self, name):
        if name in ("_it", "_dataset"):  # not set yet (a failed __init__ before __del__)
            raise AttributeError(name)
        return getattr(self._it, name)

    def _release(self):
        dataset, self._dataset = self._dataset, None
        drop = getattr(dataset, "drop_prefetched", None)
        if drop is not None:
            drop()

    def __del__(self):
        self._release()


class _ProcessState:
    """What a dataset keeps per process: threads do not survive fork()."""

    def __init__(self):
        self.pid = os.getpid()
        self.executor = None
        self.pending = collections.OrderedDict()  # batch key -> future
        self.lock = threading.Lock()


class _BatchedDataset(_data.Dataset):
    """Base: subclasses fill self._ops[i] = (ino, offset, length, inode, file_size)
    (inode: the native Inode, whose read permission each read checks)."""

    _PENDING_MAX = 4

    def __init__(self, client, transform, output: str, prefetch: bool):
        if output not in ("numpy", "bytes", "tensor"):
            raise ValueError(f"output must be 'numpy', 'bytes' or 'tensor', not {output!r}")
        self.client = _client(client)
        self.transform = transform
        self.output = output
        self.prefetch = prefetch
        self._ops = []
        self._labels = []
        self._st = None

    def __len__(self):
        return len(self._ops)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_st"] = None
        return d

    def _state(self) -> _ProcessState:
        st = self._st
        if st is None or st.pid != os.getpid():
            st = self._st = _ProcessState()
        return st

    def _read(self, indices):
        """One batched read of the samples `indices`: numpy uint8 views into
        one buffer allocated for the batch."""
        ops = [self._ops[i] for i in indices]
        total = sum(op[2] for op in ops)
        buf = np.empty(total, dtype=np.uint8)
        specs, views, at = [], [], 0
        for ino, offset, length, inode, size in ops:
            v = buf[at:at + length]
            at += length
            views.append(v)
            specs.append((ino, offset, v, inode, size))
        results = self.client.read_batch_into(specs)
        out = []
        for i, v, r in zip(indices, views, results):
            if isinstance(r, tuple):
                raise OSError(r[0], f"{os.strerror(r[0])} ({r[1]})", self._name(i))
            out.append(v[:r] if r < len(v) else v)
        return out

    def _name(self, i) -> str:
        return str(i)

    def drop_prefetched(self) -> None:
        """Gives back the batches this process prefetched and nobody took (a
        loop that stopped early): a read not started is cancelled, a finished
        one's buffer freed. weft.torch.DataLoader calls it when a loop ends."""
        st = self._st
        if st is None or st.pid != os.getpid():
            return
        # Not waited for: this may run from a finalizer on a thread inside
        # __getitems__ (which holds the lock); those batches stay then.
        if not st.lock.acquire(blocking=False):
            return
        try:
            for fut in st.pending.values():
                fut.cancel()
            st.pending.clear()
        finally:
            st.lock.release()

    def _finish(self, arr):
        if self.output == "bytes":
            arr = arr.tobytes()
        elif self.output == "tensor":
            arr = torch.from_numpy(arr)
        return self.transform(arr) if self.transform is not None else arr

    def __getitem__(self, index):
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        return self._finish(self._read([index])[0])

    def __getitems__(self, indices):
        # operator.index, as list indexing: int() would take index 0.5 as 0.
        key = tuple(operator.index(i) for i in indices)
        n = len(self)
        for i in key:
            if not 0 <= i < n:
                raise IndexError(f"index {i} out of range for {n} samples")
        st = self._state()
        fut = None
        with st.lock:
            fut = st.pending.pop(key, None)
            upcoming = getattr(indices, "upcoming", None) if self.prefetch else None
            if upcoming:
                info = _data.get_worker_info()
                stride = info.num_workers if info is not None else 1
                if len(upcoming) >= stride:
                    nxt = tuple(int(i) for i in upcoming[stride - 1])
                    if (nxt not in st.pending and all(0 <= i < n for i in nxt)
                            and not _weft._native.exiting()):
                        if st.executor is None:
                            st.executor = _futures.ThreadPoolExecutor(1, thread_name_prefix="weft-prefetch")
                        try:
                            st.pending[nxt] = st.executor.submit(self._read, nxt)
                        except RuntimeError:
                            pass  # interpreter shutdown: no prefetch
                        while len(st.pending) > self._PENDING_MAX:
                            _, old = st.pending.popitem(last=False)
                            old.cancel()
        arrays = fut.result() if fut is not None else self._read(key)
        return [self._finish(a) for a in arrays]


class FileDataset(_BatchedDataset):
    """One sample per regular file under `root` (recursively by default), in
    sorted path order; a symlink to a file is a sample read as that file, a
    symlink to a directory is not entered (as os.walk). A sample is the file's bytes: a numpy uint8 array
    (output="numpy", no copy), bytes, or a uint8 tensor; then `transform`.

    The files are listed once, at construction (with their inode, size and
    layout, so that reads ask the metadata service nothing); files changed
    afterwards are read at their listed size.
    """

    def __init__(self, root, client=None, transform=None, recursive: bool = True, suffix: str | None = None,
                 output: str = "numpy", prefetch: bool = True):
        super().__init__(client, transform, output, prefetch)
        root = os.fsdecode(root)  # str, bytes or os.PathLike; names decoded as os.fsdecode does
        self.root = root
        found = []
        stack = [root]
        while stack:
            d = stack.pop()
            for e in self.client.scandir(d):
                if e.is_dir():
                    if recursive and not e.is_symlink():  # as os.walk: linked directories not entered
                        stack.append(e.path)
                elif e.is_file() and (suffix is None or e.name.endswith(suffix)):
                    # A symlink to a file is a sample: read as the file it names.
                    found.append((e.path, e._followed() if e.is_symlink() else e.native))
        found.sort(key=lambda x: x[0])
        self.paths = [p for p, _ in found]
        self._ops = [(n.ino, 0, n.size, n, n.size) for _, n in found]

    def _name(self, i) -> str:
        return self.paths[i]


class ShardDataset(_BatchedDataset):
    """One sample per record (path, offset, length) inside large shard files.
    Each shard is resolved once, at construction."""

    def __init__(self, records, client=None, transform=None, output: str = "numpy", prefetch: bool = True):
        super().__init__(client, transform, output, prefetch)
        # operator.index: int() would take an offset 0.5 as 0. A negative
        # offset or length would be read from elsewhere in the batch's buffer
        # (a wrong sample, no error) or fail only at the first read.
        records = [(os.fsdecode(p), operator.index(o), operator.index(n)) for p, o, n in records]
        for p, o, n in records:
            if o < 0 or n < 0:
                raise ValueError(f"record ({p!r}, {o}, {n}): negative offset or length")
        paths = list(dict.fromkeys(p for p, _, _ in records))
        inodes = {}
        for p, n in zip(paths, self.client.native.stat_many([_weft._fs(p) for p in paths])):
            if isinstance(n, tuple):
                raise OSError(n[0], f"{os.strerror(n[0])} ({n[1]})", p)
            if n.is_dir():
                raise IsADirectoryError(21, "Is a directory", p)
            if not n.is_file():
                raise OSError(22, "Invalid argument (not a regular file)", p)
            inodes[p] = n
        self.records = records
        self._ops = []
        for p, o, length in records:
            n = inodes[p]
            if o + length > n.size:
                raise ValueError(f"record ({p!r}, {o}, {length}) ends past the end of the file ({n.size} bytes)")
            self._ops.append((n.ino, o, length, n, n.size))

    def _name(self, i) -> str:
        p, o, n = self.records[i]
        return f"{p}[{o}:{o + n}]"


# ---------------------------------------------------------------------------
# Checkpoints

_FORMAT = "weft-checkpoint"
# 1: every tensor stored in C order. 2: a tensor record may have "perm" (its
# bytes are in the order of tensor.permute(perm), e.g. channels_last); written
# only when some tensor has one, so that a reader of version 1 refuses it
# rather than reading the bytes in the wrong order.
_VERSION = 1
_VERSION_PERM = 2
_VERSIONS = (_VERSION, _VERSION_PERM)
_MANIFEST = "manifest.pkl"
_DATA = "data.bin"
_ALIGN = 4096
_PIECE = 8 << 20          # bytes per native write / read
_READ_BATCH_BYTES = 32 << 20   # per read_batch call (under the 80 MiB RPC payload limit per server)


def _split(path):
    path = os.fsdecode(path)  # str, bytes or os.PathLike
    path = "/" + "/".join(p for p in path.split("/") if p)
    if path == "/":
        raise ValueError("a checkpoint cannot be the root directory")
    parent, _, name = path.rpartition("/")
    if name in (".", ".."):
        # Refused before any byte is written (the final rename would fail).
        raise ValueError(f"a checkpoint must be named by a file name, not {name!r}: {path}")
    return path, parent or "/", name


def _dtype_from_name(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in checkpoint")
    return dt


def _dense_order(t: torch.Tensor):
    """The permutation `perm` (a list) for which t.permute(perm) is contiguous,
    when t is not contiguous but is one permuted (channels_last, a
    transpose...); else None."""
    if t.dim() < 2 or t.numel() <= 1 or t.is_contiguous():
        return None
    perm = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return perm if t.permute(perm).is_contiguous() else None


def _stored(t: torch.Tensor):
    """(tensor whose C-order bytes are stored, perm or None): conjugate and
    negative views resolved (their bits are not in the bytes); a permuted
    dense tensor (channels_last...) is kept in its memory order, as
    torch.save keeps strides."""
    t = t.detach().resolve_conj().resolve_neg()
    perm = _dense_order(t)
    return (t.permute(perm) if perm else t), perm


def _flat_bytes(t: torch.Tensor) -> np.ndarray:
    """The tensor's bytes in C order, as a numpy uint8 array (a copy only if
    the tensor is not contiguous or not on the CPU)."""
    t = t.detach()
    if t.numel() == 0:
        return np.empty(0, dtype=np.uint8)
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous().reshape(-1)
    if t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    return t.numpy()


class _Pickler(pickle.Pickler):
    def __init__(self, f, records, payloads):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.records = records
        self.payloads = payloads
        self.seen = {}
        self.offset = 0

    def persistent_id(self, obj):
        if not isinstance(obj, torch.Tensor) or obj.layout != torch.strided or obj.is_quantized:
            return None
        key = id(obj)
        if key in self.seen:
            return ("weft-tensor", self.seen[key][0])
        stored, perm = _stored(obj)
        data = _flat_bytes(stored)
        index = len(self.records)
        rec = dict(offset=self.offset, nbytes=int(data.nbytes), dtype=str(obj.dtype), shape=tuple(obj.shape),
                   requires_grad=bool(obj.requires_grad), parameter=isinstance(obj, torch.nn.Parameter),
                   device=str(obj.device))
        if perm:
            rec["perm"] = perm
        self.records.append(rec)
        self.payloads.append(data)
        self.seen[key] = (index, obj)  # keeps obj alive so id() stays unique
        self.offset += (data.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        return ("weft-tensor", index)


class _Unpickler(pickle.Unpickler):
    """The full unpickler of `object`: any global, so any code (load's
    weights_only=False, for a checkpoint one trusts)."""

    def __init__(self, f, tensors):
        super().__init__(f)
        self.tensors = tensors

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "weft-tensor" and type(pid[1]) is int
                and 0 <= pid[1] < len(self.tensors)):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r}")
        return self.tensors[pid[1]]


# What a weights_only load may name: types and functions that build plain
# data whatever their arguments (no getattr, no eval, no import), as
# torch.load(weights_only=True) allows.
_SAFE_GLOBALS = frozenset(
    [("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "bytearray", "bytes", "str", "int",
                               "float", "complex", "bool", "slice", "range")]
    + [("collections", n) for n in ("OrderedDict", "defaultdict", "Counter", "deque")]
    + [("torch", "Size"), ("torch", "device"), ("torch.serialization", "_get_layout"),
       ("torch._utils", "_rebuild_sparse_tensor"), ("torch._utils", "_rebuild_sparse_csr_tensor")])
# Constants named by a global (torch.float16, torch.channels_last, ...): values, never called.
_SAFE_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format, torch.qscheme)


def _refuse_global(module: str, name: str, why: str):
    raise pickle.UnpicklingError(
        f"{module}.{name}: {why}; load(..., weights_only=False) loads any object, which runs code named by the "
        f"checkpoint: only for a checkpoint you trust")


class _WeightsOnlyUnpickler(_Unpickler):
    """`object` with only containers, tensors and torch's plain types (load's
    default, weights_only=True): a crafted checkpoint runs no code."""

    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS:
            return super().find_class(module, name)
        if module in ("torch", "torch._utils"):  # torch._utils: how protocol 4 names torch.channels_last
            obj = torch
            for part in name.removeprefix("torch.").split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, _SAFE_CONSTANTS):
                return obj
        _refuse_global(module, name, "not allowed by weights_only=True")


class _ManifestUnpickler(pickle.Unpickler):
    """The manifest holds only built-in values, but for torch_version: a
    TorchVersion (a str) in checkpoints of earlier saves."""

    def find_class(self, module, name):
        if (module, name) == ("torch.torch_version", "TorchVersion"):
            return super().find_class(module, name)
        _refuse_global(module, name, "a global in a checkpoint manifest (save writes none)")


def _read_manifest(client, path: str) -> dict:
    with client.open(f"{path}/{_MANIFEST}", "rb", buffering=0) as f:
        manifest = _ManifestUnpickler(io.BytesIO(f.readall())).load()
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise ValueError(f"{path}: not a weft checkpoint")
    return manifest


def _run_all(fn, calls, threads: int, prefix: str) -> None:
    """fn(*args) for every args of `calls`: on a pool of up to `threads`
    threads, or in this thread when threads <= 1 or the interpreter is exiting
    (an atexit hook: concurrent.futures refuses new work then, and the
    extension parks every thread but the exiting one)."""
    jobs = []
    if threads > 1 and len(calls) > 1 and not _weft._native.exiting():
        with _futures.ThreadPoolExecutor(min(threads, len(calls)), thread_name_prefix=prefix) as pool:
            try:
                for args in calls:
                    jobs.append(pool.submit(fn, *args))
            except RuntimeError:
                pass  # "cannot schedule new futures after interpreter shutdown": the rest here
            for j in jobs:
                j.result()
    for args in calls[len(jobs):]:
        fn(*args)


def _write_all(nf, view, offset):
    while len(view):
        n = nf.pwrite(view, offset)
        view = view[n:]
        offset += n


def save(obj, path, client=None, threads: int = 8) -> None:
    """Saves `obj` (a state dict, or any picklable object holding tensors) as
    checkpoint directory `path`, durably and atomically (see module doc).

    Tensors (CPU or not, any strided dtype) go into one data file; everything
    else is pickled in the manifest. Tensors shared by identity are stored
    once; views of one storage are stored separately.
    """
    client = _client(client)
    path, parent, name = _split(path)
    client.makedirs(parent, exist_ok=True)
    _sweep_stale_tmp(client, parent, name)
    tmp = f"{parent.rstrip('/')}/{_tmp_prefix(name)}{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
    client.mkdir(tmp)
    tmp_ino = client.lstat(tmp).st_ino  # a failed swap back leaves someone else's data under tmp: kept
    delay = float(os.environ.get("WEFT_TORCH_SAVE_TEST_DELAY", "0") or 0)  # test hook: seconds between tensors
    try:
        records, payloads = [], []
        obj_buf = io.BytesIO()
        _Pickler(obj_buf, records, payloads).dump(obj)

        nf = client.native.open(_weft._fs(f"{tmp}/{_DATA}"), _weft._native.O_WRONLY | _weft._native.O_CREAT
                                | _weft._native.O_EXCL, 0o644)
        data_ino = nf.ino
        try:
            if delay > 0:
                for rec, data in zip(records, payloads):
                    _write_all(nf, memoryview(data), rec["offset"])
                    nf.flush()
                    time.sleep(delay)
            else:
                calls = []
                for rec, data in zip(records, payloads):
                    view = memoryview(data)
                    for at in range(0, len(view), _PIECE):
                        calls.append((nf, view[at:at + _PIECE], rec["offset"] + at))
                _run_all(_write_all, calls, threads, "weft-save")
            nf.fsync()
        finally:
            nf.close()

        version = _VERSION_PERM if any("perm" in r for r in records) else _VERSION
        # data_ino: the data file this manifest describes (inode numbers are
        # never reused); load checks it (a manifest of one checkpoint read
        # with the data of another).
        # byteorder: the order of the elements' bytes in data.bin (this
        # machine's); load swaps them on a machine of the other order.
        manifest = dict(format=_FORMAT, version=version, data=_DATA, data_ino=data_ino, tensors=records,
                        object=obj_buf.getvalue(), torch_version=str(torch.__version__),
                        byteorder=sys.byteorder)
        with client.open(f"{tmp}/{_MANIFEST}", "xb", buffering=0) as f:
            _write_all(f.native, memoryview(pickle.dumps(manifest, protocol=pickle.HIGHEST_PROTOCOL)), 0)
            f.fsync()
        _publish(client, tmp, path)
    except BaseException:
        try:
            if client.lstat(tmp).st_ino == tmp_ino:
                client.rmtree(tmp)
            else:
                _log.error("weft.torch.save: swapping %s back failed: what was there is now %s", path, tmp)
        except Exception:
            pass
        raise


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


# Who may judge a saver's pid: the same host name and pid namespace (containers
# of one host often share its name but not its pids).
_HOST = ("".join(ch if ch.isalnum() else "_" for ch in socket.gethostname())[:64] or "host") + "_" + _pid_namespace()
_STALE_TMP_AGE_S = 24 * 3600


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_NAME_MAX = 255


def _tmp_prefix(name: str) -> str:
    """".NAME.tmp-": the start of save's temporary names for `name`, with
    room left for "HOST-PID-ID" within a name's 255 bytes (a long name is cut
    and a hash of it added)."""
    raw = os.fsencode(name)
    room = _NAME_MAX - len(f"..tmp-{_HOST}-{'9' * 10}-{'f' * 12}")
    if len(raw) > room:
        raw = raw[:room - 17] + b"~" + hashlib.sha256(raw).hexdigest()[:16].encode()
    return f".{os.fsdecode(raw)}.tmp-"


def _sweep_stale_tmp(client, parent: str, name: str) -> None:
    """Removes what killed saves of `name` left behind: temporary directories
    (".NAME.tmp-HOST-PID-ID") of processes of this host and pid namespace
    that are gone, and any
    older than a day (their host may be gone; a save does not take that long).
    A live saver's directory is never touched."""
    prefix = _tmp_prefix(name)
    try:
        entries = [n for n in client.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return
    now = time.time()
    for entry in entries:
        parts = entry[len(prefix):].split("-")
        dead = False
        if len(parts) >= 3 and parts[-3] == _HOST and parts[-2].isdigit():
            dead = not _pid_alive(int(parts[-2]))
        full = f"{parent.rstrip('/')}/{entry}"
        try:
            st = client.lstat(full)
            if not dead and now - st.st_mtime < _STALE_TMP_AGE_S:
                continue
            if stat.S_ISDIR(st.st_mode):
                client.rmtree(full)
            else:
                client.remove(full)  # a swapped-out symlink (or file) of a killed publish
        except OSError:
            pass  # another sweeper or its owner removed it meanwhile


def _replaceable(client, path: str) -> bool:
    """Whether save may replace what is at `path`: an empty directory or a
    weft checkpoint (also when named by a symlink there: the link goes, never
    what it names). Anything else (a dataset, a file...) is never removed.
    An I/O error reading it (a timeout, EIO...) says nothing either way: it
    is raised, never taken for "not a checkpoint"."""
    try:
        if not stat.S_ISDIR(client.stat(path).st_mode):
            return False
        if not client.listdir(path):
            return True
        _read_manifest(client, path)
        return True
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return False  # gone, or no manifest file: not a checkpoint
    except OSError:
        raise
    except Exception:  # not a checkpoint's manifest (any unpickling error)
        return False


def _not_replaceable(path: str) -> FileExistsError:
    return FileExistsError(errno.EEXIST, "File exists (weft.torch.save replaces only a checkpoint or an empty "
                           "directory)", path)


def _publish(client, tmp: str, path: str) -> None:
    try:
        client.rename(tmp, path, noreplace=True)
        return
    except FileExistsError:
        pass
    if not _replaceable(client, path):
        raise _not_replaceable(path)
    # Replace: swap atomically, then remove the old checkpoint (now under tmp).
    client.rename(tmp, path, exchange=True)
    try:
        replaceable = _replaceable(client, tmp)
    except OSError:
        client.rename(tmp, path, exchange=True)  # cannot tell what was there: put it back
        raise
    if not replaceable:
        # Something else took `path` between the check and the swap: swap it back.
        client.rename(tmp, path, exchange=True)
        raise _not_replaceable(path)
    # What `path` was, now under tmp: a symlink (or file) goes itself, never
    # what it points to. Another saver's sweep may remove it first (its mtime
    # is the old checkpoint's). The save is done either way: a failure here
    # is logged, not raised (a later save's sweep removes what is left once
    # this process is gone, or a day later).
    try:
        if stat.S_ISDIR(client.lstat(tmp).st_mode):
            client.rmtree(tmp)
        else:
            client.remove(tmp)
    except FileNotFoundError:
        pass
    except Exception as e:
        _log.warning("weft.torch.save: %s is published; removing the checkpoint it replaced (now %s) failed: %s",
                     path, tmp, e)


def load(path, client=None, map_location=None, threads: int = 4, weights_only: bool = True):
    """Loads a checkpoint written by save(); tensors are read in parallel
    batched requests straight into their memory (on the CPU).

    weights_only=True (the default, as torch.load's since torch 2.6) loads
    tensors, containers (dict, list, tuple, set, OrderedDict, defaultdict...),
    numbers, strings and torch.Size / dtype / device: what model and
    optimizer state dicts hold; any other global raises
    pickle.UnpicklingError. weights_only=False loads any object, which runs
    whatever code the checkpoint names: only for a checkpoint you trust.

    map_location, as torch.load takes it: None keeps every tensor on the CPU
    (unlike torch.load, which puts it back where it was saved); a device
    (str or torch.device) moves every tensor there; a dict maps a saved
    location ("cuda:1") to another ("cpu"), other tensors going back where
    they were saved; a callable(storage, location) returns the storage to use
    (the CPU one given, or one it made, e.g. storage.cuda(0)) or None (back
    where it was saved). The saved location of a checkpoint written before
    locations were recorded is "cpu"."""
    client = _client(client)
    path, _, _ = _split(path)
    # A save may swap a new checkpoint directory in while this reads: the
    # manifest of one with the data of the other would be wrong without an
    # error. Each save publishes a new directory (a new inode); the one it
    # replaces is removed, or swapped back when the save fails after the swap.
    # The same inode at `path` before and after the read, and the data file
    # the manifest names (data_ino), mean manifest and data are one checkpoint's.
    for _ in range(_LOAD_ATTEMPTS - 1):
        before = client.inode(path).ino
        try:
            obj = _load_once(client, path, map_location, threads, weights_only)
        except _Mixed:
            continue
        except OSError:
            if client.inode(path).ino != before:
                continue  # read from the one replaced, maybe removed meanwhile
            raise
        if client.inode(path).ino == before:
            return obj
    before = client.inode(path).ino
    try:
        obj = _load_once(client, path, map_location, threads, weights_only)
    except _Mixed:
        raise OSError(errno.EAGAIN, f"manifest and data of different checkpoints, {_LOAD_ATTEMPTS} times", path)
    if client.inode(path).ino != before:
        raise OSError(errno.EAGAIN, f"checkpoint replaced while being loaded, {_LOAD_ATTEMPTS} times", path)
    return obj


_LOAD_ATTEMPTS = 4


class _Mixed(Exception):
    """The data file at the path is not the one the manifest read describes."""


def _untyped_storage(t: torch.Tensor):
    f = getattr(t, "untyped_storage", None)  # torch >= 2.0
    return f() if f is not None else t.storage().untyped()


def _place(t: torch.Tensor, location: str, map_location) -> torch.Tensor:
    """The CPU tensor t, saved at `location`, where map_location puts it (see load)."""
    if map_location is None:
        return t
    if isinstance(map_location, (str, torch.device)):
        return t.to(map_location)
    if isinstance(map_location, dict):
        return t.to(map_location.get(location, location))
    if callable(map_location):
        storage = _untyped_storage(t)
        result = map_location(storage, location)
        if result is None:
            return t.to(location)
        if result is storage:
            return t
        if isinstance(result, torch.storage.TypedStorage):
            result = result.untyped()
        return torch.empty(0, dtype=t.dtype, device=result.device).set_(result, t.storage_offset(), t.size(),
                                                                        t.stride())
    raise TypeError(f"map_location must be None, a str, a torch.device, a dict or a callable, "
                    f"not {type(map_location).__name__}")


def _swap_bytes(raw: torch.Tensor, dtype: torch.dtype) -> None:
    """Reverses the byte order of every element of `dtype` in `raw` (uint8),
    in place: each component of a complex number on its own."""
    size = torch.empty(0, dtype=dtype).element_size()
    if dtype.is_complex:
        size //= 2
    if size > 1:
        raw.numpy().view(f"u{size}").byteswap(inplace=True)


def _corrupt(path: str, why: str) -> ValueError:
    return ValueError(f"{path}: corrupt checkpoint manifest ({why})")


def _check_records(manifest: dict, path: str, data_size: int) -> list:
    """The manifest's tensor records, checked before any byte is read: a
    damaged or crafted manifest raises ValueError naming what is wrong, not
    a KeyError, a TypeError from the native read or a torch RuntimeError
    (and no tensor of a wrong length, or bytes swapped by a bad byteorder)."""
    if manifest.get("byteorder", "little") not in ("little", "big"):
        raise _corrupt(path, f"byteorder {manifest.get('byteorder')!r}")
    if not isinstance(manifest.get("object"), bytes):
        raise _corrupt(path, "no pickled object")
    records = manifest.get("tensors")
    if not isinstance(records, list):
        raise _corrupt(path, "no tensor list")
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise _corrupt(path, f"tensor {i} is not a record")
        offset, nbytes, shape = r.get("offset"), r.get("nbytes"), r.get("shape")
        if type(offset) is not int or type(nbytes) is not int or offset < 0 or nbytes < 0:
            raise _corrupt(path, f"tensor {i}: offset {offset!r}, nbytes {nbytes!r}")
        if nbytes and offset + nbytes > data_size:  # (an empty tensor's offset may be past the end: alignment)
            raise _corrupt(path, f"tensor {i}: bytes {offset}..{offset + nbytes} past the data's {data_size}")
        if not isinstance(shape, (tuple, list)) or not all(type(d) is int and d >= 0 for d in shape):
            raise _corrupt(path, f"tensor {i}: shape {shape!r}")
        try:
            dtype = _dtype_from_name(r.get("dtype"))
        except (ValueError, AttributeError):
            raise _corrupt(path, f"tensor {i}: dtype {r.get('dtype')!r}") from None
        numel = 1
        for d in shape:
            numel *= d
        if numel * torch.empty(0, dtype=dtype).element_size() != nbytes:
            raise _corrupt(path, f"tensor {i}: {nbytes} bytes for shape {tuple(shape)} of {r['dtype']}")
        perm = r.get("perm")
        if perm and (not isinstance(perm, (list, tuple)) or not all(type(d) is int for d in perm)
                     or sorted(perm) != list(range(len(shape)))):
            raise _corrupt(path, f"tensor {i}: perm {perm!r}")
    return records


def _load_once(client, path: str, map_location, threads: int, weights_only: bool):
    manifest = _read_manifest(client, path)
    if manifest.get("version") not in _VERSIONS:
        raise ValueError(f"{path}: checkpoint version {manifest.get('version')} (this reads {_VERSIONS})")
    data = manifest.get("data")
    if not isinstance(data, str) or not data or "/" in data or data in (".", ".."):
        raise _corrupt(path, f"data file name {data!r}")
    data_path = f"{path}/{data}"
    node = client.inode(data_path)
    if manifest.get("data_ino", node.ino) != node.ino:  # (a checkpoint saved before data_ino: not checked)
        raise _Mixed(path)
    records = _check_records(manifest, path, node.size)

    buffers = [torch.empty(r["nbytes"], dtype=torch.uint8) for r in records]
    # Pieces of at most _PIECE bytes, grouped into batches of ~_READ_BATCH_BYTES.
    batches, batch, batch_bytes = [], [], 0
    for r, b in zip(records, buffers):
        arr = b.numpy()
        for at in range(0, r["nbytes"], _PIECE):
            piece = arr[at:at + _PIECE]
            batch.append((node.ino, r["offset"] + at, piece, node, node.size))
            batch_bytes += len(piece)
            if batch_bytes >= _READ_BATCH_BYTES:
                batches.append(batch)
                batch, batch_bytes = [], 0
    if batch:
        batches.append(batch)

    def run(specs):
        results = client.read_batch_into(specs)
        for (ino, off, piece, _, _), res in zip(specs, results):
            if isinstance(res, tuple):
                raise OSError(res[0], f"{os.strerror(res[0])} ({res[1]})", data_path)
            if res != len(piece):
                raise OSError(5, f"Input/output error (checkpoint data ends early at offset {off + res})",
                              data_path)

    _run_all(run, [(b,) for b in batches], threads, "weft-load")

    # Checkpoints saved before byteorder was recorded came from little-endian machines.
    swap = manifest.get("byteorder", "little") != sys.byteorder
    tensors = []
    for r, b in zip(records, buffers):
        dtype = _dtype_from_name(r["dtype"])
        if swap:
            _swap_bytes(b, dtype)
        perm = r.get("perm")
        if not r["nbytes"]:
            t = torch.empty(r["shape"], dtype=dtype)
        elif perm:
            inverse = [0] * len(perm)
            for i, d in enumerate(perm):
                inverse[d] = i
            t = b.view(dtype).reshape([r["shape"][d] for d in perm]).permute(inverse)
        else:
            t = b.view(dtype).reshape(r["shape"])
        t = _place(t, r.get("device", "cpu"), map_location)
        if r.get("parameter"):
            t = torch.nn.Parameter(t, requires_grad=r.get("requires_grad", True))
        elif r.get("requires_grad") and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
        tensors.append(t)
    unpickler = _WeightsOnlyUnpickler if weights_only else _Unpickler
    # As torch.load: the sparse tensors the unpickling rebuilt, unchecked, are
    # checked now (indices in range: a crafted checkpoint would read out of
    # bounds), and the list torch keeps of them is emptied either way.
    try:
        result = unpickler(io.BytesIO(manifest["object"]), tensors).load()
    except BaseException:
        torch._utils._sparse_tensors_to_validate.clear()
        raise
    torch._utils._validate_loaded_sparse_tensors()
    return result
