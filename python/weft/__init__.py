"""weft: the Python client of a Weft cluster.

    import weft
    client = weft.connect()                      # $WEFT_CONFIG, else ./weft-data/client.toml
    with client.open("/data/x.bin", "wb") as f:
        f.write(b"hello")
    with client.open("/data/x.bin", "rb") as f:
        assert f.read() == b"hello"
    arrays = client.read_batch([("/data/x.bin", 0, 5)])   # numpy uint8 arrays

Paths are absolute within the cluster ("/a/b"): str, bytes or os.PathLike,
as for os functions; names need not be UTF-8 (str names are decoded as
os.fsdecode does, bytes paths list bytes names). Errors are OSError subclasses
chosen by errno (FileNotFoundError, PermissionError, ...) carrying the path.
A Client may be used from several threads, and survives fork(): the child
reconnects on its first call (files opened before the fork are unusable
there). docs/python.md describes the API.
"""

from __future__ import annotations

import errno
import io
import operator
import os
import stat as _stat
import threading
import weakref

from . import _native

# read_batch's arrays. Imported here, not in read_batch: a child forked while
# another thread imported numpy would wait forever on that import's lock.
try:
    import numpy as _np
except ImportError:  # numpy is needed only by read_batch
    _np = None

__all__ = ["connect", "Client", "WeftFile", "StatResult"]

_TYPE_BITS = {1: _stat.S_IFREG, 2: _stat.S_IFDIR, 3: _stat.S_IFLNK, 4: _stat.S_IFIFO, 5: _stat.S_IFSOCK,
              6: _stat.S_IFCHR, 7: _stat.S_IFBLK}

# Buffered file objects use chunk-sized buffers: a round trip costs far more
# than a copy.
DEFAULT_BUFFER_SIZE = 1 << 20

# The largest file position (off_t), as io.FileIO.seek takes.
_OFF_MAX = (1 << 63) - 1


def connect(addr: str | None = None, config: str | None = None, *, io_threads: int = 0,
            write_buffer_bytes: int = 0, name: str = "weft-python", statahead_ttl: float = 0.0,
            call_timeout: float = 0.0, retry_time: float = 0.0, hold_open_files: bool = True,
            early_read_bytes: int = -1) -> "Client":
    """Connects to a cluster.

    addr: mgmtd "host:port", overriding the config's list. config: the client
    config file (default $WEFT_CONFIG, else ./weft-data/client.toml; it also
    holds the cluster token, so it is needed even with addr).
    statahead_ttl: seconds; > 0 lets read-only opens by path be answered from
    a directory listing up to that old (no metadata round trip per file; a
    file another client changed within that time is opened as listed). For
    data sets that do not change while they are read. 0 (default): off.
    call_timeout, retry_time: seconds (0: libweft's defaults, 10 and 60):
    how long one attempt of a call may take, and how long a call retries
    through failures. A call blocks (and Ctrl-C waits) up to about
    retry_time + call_timeout when the cluster is unreachable, and so does
    each unclosed file at interpreter exit: lower them to fail faster.
    hold_open_files: True (default): a file open here keeps its data while it
    is open, even once it is removed or replaced (POSIX; one small call to
    meta every few seconds while files are open). False: no such calls, and
    reads of a file removed elsewhere while open fail with ESTALE once its
    data is collected. Reads by inode (read_batch, the datasets) never hold.
    early_read_bytes: with statahead off, a read-only open by path of a file
    of at most this many bytes that a directory listing names reads it while
    metadata answers the open, and keeps the bytes only if the answer matches
    the listing (close-to-open holds). -1 (default): libweft's 1 MiB; 0: off.
    """
    return Client(addr=addr, config=config, io_threads=io_threads,
                  write_buffer_bytes=write_buffer_bytes, name=name, statahead_ttl=statahead_ttl,
                  call_timeout=call_timeout, retry_time=retry_time, hold_open_files=hold_open_files,
                  early_read_bytes=early_read_bytes)


def _raise(err: int, message: str, path: str):
    raise OSError(err, f"{os.strerror(err)} ({message})", path)


def _fs(path) -> bytes:
    """A path for the native calls: its bytes (os.fsencode of a str, bytes or
    os.PathLike). An empty path names nothing (FileNotFoundError, as for os
    calls): libweft would resolve it to the root."""
    p = os.fsencode(path)
    if not p:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    _check_nul(p)
    return p


def _check_nul(p: bytes) -> None:
    # As os calls: ValueError (libweft would answer OSError EINVAL, the
    # wrong type for a string that can never name a file).
    if b"\0" in p:
        raise ValueError("embedded null byte")


def _name_like(path, name: bytes):
    """`name` (bytes from the native side) as os.listdir gives it for `path`:
    bytes for a bytes path, else decoded by os.fsdecode (surrogateescape)."""
    return name if isinstance(path, bytes) else os.fsdecode(name)


def stat_result(inode) -> os.stat_result:
    """An os.stat_result from a native Inode (st_dev 0, st_blksize the chunk size)."""
    mode = _TYPE_BITS.get(inode.type, 0) | inode.mode
    a, m, c = inode.atime_ns, inode.mtime_ns, inode.ctime_ns
    chunk = inode.layout[0]
    blocks = (inode.size + 511) // 512
    return os.stat_result((mode, inode.ino, 0, inode.nlink, inode.uid, inode.gid, inode.size,
                           a // 10**9, m // 10**9, c // 10**9,
                           a / 1e9, m / 1e9, c / 1e9, a, m, c, chunk, blocks, inode.rdev))


StatResult = os.stat_result


class DirEntry:
    """What Client.scandir yields, as os.DirEntry: `name`, `path`, `inode()`,
    `is_dir()`, `is_file()` and `stat()` (which follow a symlink unless
    follow_symlinks=False, asking meta for its target), `is_symlink()`;
    `native` is the entry's own Inode (for a symlink, the link's).
    In a directory the caller may read but not search, the listing has names,
    inode numbers and types only: stat() and `native` then ask meta, which
    refuses (PermissionError), as os.DirEntry.stat() does there."""

    __slots__ = ("name", "path", "_ino", "_type", "_inode", "_client", "_target")

    def __init__(self, parent, name, ino, kind, inode, client=None):
        # parent and name: both str or both bytes (as os.DirEntry).
        sep = b"/" if isinstance(name, bytes) else "/"
        self.name = name
        self.path = parent.rstrip(sep) + sep + name
        self._ino = ino
        self._type = kind  # _native.TYPE_*
        self._inode = inode  # None: not given with the listing
        self._client = client
        self._target = None  # a symlink's target Inode, once asked for

    def inode(self) -> int:
        return self._ino

    def _own(self):
        """The entry's own Inode (a symlink's: the link), asked for if the listing had none."""
        if self._inode is None:
            self._inode = self._client.native.stat(_fs(self.path), False)
        return self._inode

    def _followed(self):
        """The Inode a symlink names (raises OSError when it names nothing)."""
        if self._target is None:
            self._target = self._client.native.stat(_fs(self.path), True)
        return self._target

    def _is(self, kind, follow_symlinks):
        if not (follow_symlinks and self.is_symlink() and self._client is not None):
            return self._type == kind
        try:
            return self._followed().type == kind
        except OSError:  # a dangling link: neither, as os.DirEntry says
            return False

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return self._is(_native.TYPE_DIRECTORY, follow_symlinks)

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return self._is(_native.TYPE_FILE, follow_symlinks)

    def is_symlink(self) -> bool:
        return self._type == _native.TYPE_SYMLINK

    def is_junction(self) -> bool:
        return False

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks and self.is_symlink() and self._client is not None:
            return stat_result(self._followed())
        return stat_result(self._own())

    def __fspath__(self):
        return self.path

    @property
    def native(self):
        return self._own()

    def __repr__(self):
        return f"<weft.DirEntry {self.path!r}>"


def _parse_mode(mode: str):
    """(flags, readable, writable, append, binary) as open() reads `mode`."""
    chars = set(mode)
    if len(chars) != len(mode) or not chars <= set("rwaxb+t") or "b" in chars and "t" in chars:
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = [c for c in "rwax" if c in chars]
    if len(kinds) != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    kind, plus = kinds[0], "+" in chars
    n = _native
    if kind == "r":
        flags = n.O_RDWR if plus else n.O_RDONLY
    elif kind == "w":
        flags = (n.O_RDWR if plus else n.O_WRONLY) | n.O_CREAT | n.O_TRUNC
    elif kind == "a":
        flags = (n.O_RDWR if plus else n.O_WRONLY) | n.O_CREAT | n.O_APPEND
    else:
        flags = (n.O_RDWR if plus else n.O_WRONLY) | n.O_CREAT | n.O_EXCL
    readable = kind == "r" or plus
    writable = kind != "r" or plus
    return flags, readable, writable, kind == "a", "b" in chars


class _FlushThrough:
    """io's buffered writers hand their bytes to the raw file on flush() but
    never call its flush(), which is what sends them to the storage servers
    and reports the length (so that other clients see them): these do."""

    def flush(self) -> None:
        super().flush()
        if not self.raw.closed:
            self.raw.flush()


class _BufferedWriter(_FlushThrough, io.BufferedWriter):
    pass


class _BufferedRandom(_FlushThrough, io.BufferedRandom):
    pass


class WeftFile(io.RawIOBase):
    """A raw (unbuffered) binary file of the cluster over native pread/pwrite.

    Client.open wraps it in io.BufferedReader/Writer/Random as open() does.
    Extra methods: fsync() (durable when it returns), size().
    """

    def __init__(self, native_file, path: str, mode: str, readable: bool, writable: bool, append: bool):
        super().__init__()
        self._f = native_file
        self._pos = native_file.size() if append else 0
        self._readable = readable
        self._writable = writable
        self._append = append
        self.name = path
        self.mode = mode

    # -- capabilities --
    def readable(self) -> bool:
        self._check_open()
        return self._readable

    def writable(self) -> bool:
        self._check_open()
        return self._writable

    def seekable(self) -> bool:
        self._check_open()
        return True

    def fileno(self):
        raise io.UnsupportedOperation("a weft file has no file descriptor")

    def isatty(self) -> bool:
        self._check_open()
        return False

    # -- data --
    def readinto(self, b) -> int:
        self._check_open()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        n = self._f.pread(b, self._pos)
        self._pos += n
        return n

    def readall(self) -> bytes:
        self._check_open()
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        size = self._f.size()
        # Straight into the bytes returned: the file's size in memory, not twice it.
        data = self._f.pread_bytes(size - self._pos, self._pos) if size > self._pos else b""
        self._pos += len(data)
        # The file may have grown since this file object last asked (another
        # writer): read on until a read comes back empty. One at or past the
        # known end is what asks meta for the length again, so there is
        # always one, also when nothing was left to read.
        grown = bytearray()
        while True:
            more = bytearray(DEFAULT_BUFFER_SIZE)
            got = self._f.pread(more, self._pos)
            if not got:
                break
            grown += memoryview(more)[:got]
            self._pos += got
        return data + bytes(grown) if grown else data

    def write(self, b) -> int:
        self._check_open()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        if self._append:
            # O_APPEND: libweft writes at the end of the file as this client
            # knows it (every file object of it here included), whatever the
            # offset; the position is then the end of that write.
            n = self._f.pwrite(b, 0)
            self._pos = self._f.size()
            return n
        n = self._f.pwrite(b, self._pos)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        # As io.FileIO: a float (or None) is a TypeError now, not at the next
        # read or write; a position past off_t an OverflowError.
        offset = operator.index(offset)
        whence = operator.index(whence)
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._f.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if pos < 0:
            raise OSError(22, "Invalid argument (negative seek position)", self.name)
        if pos > _OFF_MAX:
            raise OverflowError("seek position too large")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check_open()
        return self._pos

    def truncate(self, size: int | None = None) -> int:
        self._check_open()
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        # As io.FileIO: TypeError for a float, OSError EINVAL for a negative
        # size (the native call), OverflowError past 64 bits.
        size = self._pos if size is None else operator.index(size)
        self._f.truncate(size)
        return size

    def size(self) -> int:
        """The length as this file knows it (at open, grown by its own writes)."""
        self._check_open()
        return self._f.size()

    def flush(self) -> None:
        # Sends buffered bytes to the storage servers (visible to other clients).
        if self.closed:
            raise ValueError("I/O operation on closed file")  # as io.FileIO
        if self._f.closed:
            return  # close(): its native close flushed (IOBase.close flushes after it)
        if self._writable:
            self._f.flush()

    def fsync(self) -> None:
        """Data and length are durable when this returns."""
        self._check_open()
        self._f.fsync()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._f.close()
        finally:
            super().close()

    @property
    def native(self):
        return self._f

    # As io.FileIO: not picklable nor copyable (a copy shared the native file:
    # closing one closed both).
    def __reduce_ex__(self, protocol):
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    def __reduce__(self):
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    def _check_open(self):
        if self.closed:
            raise ValueError("I/O operation on closed file.")

    def __repr__(self):
        return f"<weft.WeftFile name={self.name!r} mode={self.mode!r}>"


def _fsync_of(f):
    raw = f
    while not isinstance(raw, WeftFile):
        inner = getattr(raw, "buffer", None) or getattr(raw, "raw", None)
        if inner is None:
            raise TypeError("not a weft file")
        raw = inner
    return raw


def fsync(f) -> None:
    """Makes what was written through a file of Client.open durable
    (os.fsync does not apply: weft files have no descriptor)."""
    f.flush()
    _fsync_of(f).fsync()


# Every live Client, to forget per-process state after fork().
_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


class Client:
    """A connection to a cluster. Thread-safe; picklable (reconnects); fork-safe."""

    def __init__(self, addr: str | None = None, config: str | None = None, *, io_threads: int = 0,
                 write_buffer_bytes: int = 0, name: str = "weft-python", statahead_ttl: float = 0.0,
                 call_timeout: float = 0.0, retry_time: float = 0.0, hold_open_files: bool = True,
                 early_read_bytes: int = -1):
        self._args = dict(addr=addr, config=config, io_threads=io_threads,
                          write_buffer_bytes=write_buffer_bytes, name=name, statahead_ttl=statahead_ttl,
                          call_timeout=call_timeout, retry_time=retry_time,
                          hold_open_files=bool(hold_open_files), early_read_bytes=int(early_read_bytes))
        self._lock = threading.Lock()
        self._native = None
        self._native_connect()
        _clients.add(self)

    def _native_connect(self):
        a = self._args
        self._native = _native.connect(config=a["config"] or "", cluster=a["addr"] or "",
                                       io_threads=a["io_threads"], write_buffer_bytes=a["write_buffer_bytes"],
                                       name=a["name"], statahead_ttl=a["statahead_ttl"],
                                       call_timeout=a.get("call_timeout", 0.0), retry_time=a.get("retry_time", 0.0),
                                       hold_open_files=a.get("hold_open_files", True),
                                       early_read_bytes=a.get("early_read_bytes", -1))

    @property
    def native(self):
        """The native client of this process (connects again after a fork)."""
        n = self._native
        if n is None:
            with self._lock:
                if self._native is None:
                    self._native_connect()
                n = self._native
        return n

    def _after_fork_in_child(self):
        # The native client's threads do not exist here: leak it (never
        # destroy it) and reconnect on the next use.
        _leaked.append(self._native)
        self._native = None
        self._lock = threading.Lock()

    def __reduce__(self):
        return (_reconnect, (self._args,))

    def __repr__(self):
        return f"<weft.Client {self.native.description()}>"

    # ---- files ----
    def open(self, path, mode: str = "rb", buffering: int = -1, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None, perm: int = 0o644):
        """Opens a file like open(): modes r, w, a, x, with + and b/t.

        Binary modes give io.BufferedReader/Writer/Random over a WeftFile
        (buffering=0: the WeftFile itself); text modes an io.TextIOWrapper.
        """
        flags, readable, writable, append, binary = _parse_mode(mode)
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        if buffering == 0 and not binary:
            raise ValueError("can't have unbuffered text I/O")
        nf = self.native.open(_fs(path), flags, perm)
        raw = WeftFile(nf, path, mode, readable, writable, append)
        if buffering == 0:
            return raw
        size = DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        try:
            if readable and writable:
                buffered = _BufferedRandom(raw, size)
            elif writable:
                buffered = _BufferedWriter(raw, size)
            else:
                buffered = io.BufferedReader(raw, size)
            if binary:
                return buffered
            text = io.TextIOWrapper(buffered, encoding, errors, newline, line_buffering=buffering == 1)
            text.mode = mode
            return text
        except BaseException:
            raw.close()
            raise

    def read_file(self, path) -> bytes:
        with self.open(path, "rb", buffering=0) as f:
            return f.readall()

    def write_file(self, path, data, fsync: bool = False) -> None:
        view = memoryview(data).cast("B")  # before the file is emptied: bad data leaves it as it was
        with self.open(path, "wb", buffering=0) as f:
            while view:
                n = f.write(view)
                view = view[n:]
            if fsync:
                f.fsync()

    # ---- batches ----
    def read_batch(self, requests, errors: str = "raise"):
        """Reads many (path, offset, length) ranges in one batched request.

        Returns one numpy uint8 array per request (read straight into it by
        the native code; shorter at end of file). length None or -1: to the
        end of the file. errors="return": a failed read gives its OSError in
        place of the array instead of raising.
        """
        if _np is None:
            raise ImportError("weft.Client.read_batch needs numpy")
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
        requests = list(requests)
        paths = list(dict.fromkeys(r[0] for r in requests))
        inodes = dict(zip(paths, self.native.stat_many([_fs(p) for p in paths])))
        specs, arrays, failed = [], [], {}
        for i, (path, offset, length) in enumerate(requests):
            # Checked before any read (as File.pread: TypeError, OSError EINVAL, OverflowError).
            offset = operator.index(offset)
            if offset < 0:
                raise OSError(errno.EINVAL, "Invalid argument (negative offset)", path)
            if offset > _OFF_MAX:
                raise OverflowError("read_batch offset too large")
            if length is not None:
                length = operator.index(length)
            n = inodes[path]
            if isinstance(n, tuple):
                failed[i] = OSError(n[0], f"{os.strerror(n[0])} ({n[1]})", path)
                arrays.append(None)
                continue
            if not n.is_file():
                err = 21 if n.is_dir() else 22
                failed[i] = OSError(err, os.strerror(err), path)
                arrays.append(None)
                continue
            if length is None or length < 0:
                length = max(0, n.size - offset)
            a = _np.empty(length, dtype=_np.uint8)
            arrays.append(a)
            specs.append((i, (n.ino, offset, a, n, n.size)))  # the Inode: read permission checked
        results = self.native.read_batch([s for _, s in specs]) if specs else []
        for (i, _), r in zip(specs, results):
            if isinstance(r, tuple):
                failed[i] = OSError(r[0], f"{os.strerror(r[0])} ({r[1]})", requests[i][0])
            elif r < len(arrays[i]):
                arrays[i] = arrays[i][:r]
        if failed:
            if errors == "raise":
                raise failed[min(failed)]
            for i, e in failed.items():
                arrays[i] = e
        return arrays

    def read_batch_into(self, specs):
        """Low level: specs of (ino, offset, buffer, inode, file_size) with the
        native Inode from scandir/stat (its layout and size are used, and read
        permission is checked on it; a layout tuple in its place is read
        without that check); returns bytes read per spec, or (errno, message)."""
        return self.native.read_batch(specs)

    # ---- namespace ----
    def stat(self, path, follow_symlinks: bool = True) -> os.stat_result:
        return stat_result(self.native.stat(_fs(path), follow_symlinks))

    def lstat(self, path) -> os.stat_result:
        return self.stat(path, follow_symlinks=False)

    def inode(self, path, follow_symlinks: bool = True):
        """The native Inode (ino, size, layout, ...) of a path."""
        return self.native.stat(_fs(path), follow_symlinks)

    # As os.path: False for any OSError (a name that cannot be looked up, as
    # in a directory without search permission, is not there for the caller).
    def exists(self, path) -> bool:
        try:
            return self.native.exists(_fs(path), True)
        except (OSError, ValueError):
            return False

    def isdir(self, path) -> bool:
        try:
            return self.native.stat(_fs(path), True).is_dir()
        except (OSError, ValueError):
            return False

    def isfile(self, path) -> bool:
        try:
            return self.native.stat(_fs(path), True).is_file()
        except (OSError, ValueError):
            return False

    def listdir(self, path="/") -> list:
        """Names in directory `path`: str (os.fsdecode), or bytes for a bytes path, as os.listdir."""
        names = self.native.listdir(_fs(path))
        return names if isinstance(os.fspath(path), bytes) else [os.fsdecode(n) for n in names]

    def scandir(self, path="/") -> list[DirEntry]:
        p = os.fspath(path)
        return [DirEntry(p, _name_like(p, name), ino, kind, n, self)
                for name, ino, kind, n in self.native.scandir(_fs(p))]

    def walk(self, top="/"):
        """Like os.walk (top-down, symlinks not followed)."""
        top = os.fspath(top)
        entries = self.scandir(top)
        # As os.walk: a symlink to a directory is listed among dirs, not entered.
        dirs = [e.name for e in entries if e.is_dir()]
        files = [e.name for e in entries if not e.is_dir()]
        yield top, dirs, files
        sep = b"/" if isinstance(top, bytes) else "/"
        for e in entries:
            if e.is_dir() and not e.is_symlink():
                yield from self.walk(top.rstrip(sep) + sep + e.name)

    def makedirs(self, path, mode: int = 0o755, exist_ok: bool = False) -> None:
        p = _fs(path)
        mode = _dir_mode(mode)  # checked whether or not the directory exists
        try:
            n = self.native.stat(p, True)
        except (FileNotFoundError, NotADirectoryError):
            n = None
        if n is not None and (not exist_ok or not n.is_dir()):
            raise FileExistsError(17, "File exists", path)
        self.native.mkdirs(p, mode)

    def mkdir(self, path, mode: int = 0o755) -> None:
        self.native.mkdir(_fs(path), _dir_mode(mode))

    def remove(self, path) -> None:
        """Removes a file or symlink (IsADirectoryError on a directory)."""
        self.native.remove(_fs(path), False)

    unlink = remove

    def rmdir(self, path) -> None:
        self.native.remove(_fs(path), True)

    def rmtree(self, path) -> None:
        """Removes directory `path` and everything under it. Symlinks inside
        are removed, never followed; `path` itself may not be one (as
        shutil.rmtree: listing through it would empty the directory it names).
        As `weft rm -r` (and GNU rm), refuses the root and a path whose last
        component is "." or ".." (OSError EINVAL): relative names resolve from
        the root, so "", "." or "a/.." would empty the whole cluster. An
        empty path is FileNotFoundError, as for shutil.rmtree."""
        p = _fs(path)
        last = p.rstrip(b"/").rpartition(b"/")[2]
        if last in (b".", b".."):
            raise OSError(errno.EINVAL, "Invalid argument (rmtree refuses to remove '.' or '..')", path)
        # Without a trailing '/': "link/" would name the directory the link
        # points to (a path ending in '/' names a directory), and empty it.
        n = self.native.stat(p.rstrip(b"/") or b"/", False)
        if n.is_symlink():
            raise OSError(errno.ELOOP, "rmtree of a symbolic link (not followed)", path)
        if n.ino == _native.ROOT_INO:
            raise OSError(errno.EINVAL, "Invalid argument (rmtree refuses to remove the root)", path)
        if not n.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
        # By inode from the parent (libweft's remove_tree): a directory
        # replaced by a symlink meanwhile is not followed, one moved away is
        # not reached through the old path. The walk goes on past an error
        # and raises the first one at the end.
        # With a trailing '/': the checks above took the cached way, and the
        # name may be a file or a symlink by now (another client): named as
        # a directory, remove_tree looks at it afresh and refuses one.
        self.native.remove_tree(p.rstrip(b"/") + b"/")

    def rename(self, src, dst, *, exchange: bool = False, noreplace: bool = False) -> None:
        """Renames src to dst, replacing dst (a file, or an empty directory)
        as os.rename does; exchange=True swaps the two atomically (both must
        exist); noreplace=True fails with FileExistsError if dst exists."""
        if exchange and noreplace:
            raise ValueError("exchange and noreplace exclude each other")
        flags = _native.RENAME_EXCHANGE if exchange else _native.RENAME_NOREPLACE if noreplace else 0
        self.native.rename(_fs(src), _fs(dst), flags)

    replace = rename

    def symlink(self, target, path) -> None:
        t = os.fsencode(target)
        _check_nul(t)
        self.native.symlink(t, _fs(path))

    def readlink(self, path):
        """The target: str (os.fsdecode), or bytes for a bytes path, as os.readlink."""
        return _name_like(os.fspath(path), self.native.readlink(_fs(path)))

    def get_layout(self, path) -> dict:
        c, s, t, f, seed = self.native.get_layout(_fs(path))
        return dict(chunk_bytes=c, stripe_count=s, chain_table_id=t, first_chain=f, shuffle_seed=seed)

    def set_layout(self, path, chunk_bytes: int | None = None, stripe_count: int | None = None) -> None:
        """Sets the layout new files of directory `path` get."""
        p = _fs(path)
        c, s, t, f, seed = self.native.get_layout(p)
        c = c if chunk_bytes is None else _layout_count("chunk_bytes", chunk_bytes)
        s = s if stripe_count is None else _layout_count("stripe_count", stripe_count)
        self.native.set_layout(p, (c, s, t, f, seed))


def _dir_mode(mode) -> int:
    """A directory's mode: an integer (TypeError otherwise, as os.mkdir),
    its permission bits kept (a stat's st_mode works, as with os.mkdir).
    Negative is ValueError and past 32 bits OverflowError (os.mkdir takes -1
    as all bits and stops at 2**31 - 1; pybind11 gave a TypeError naming C++
    types)."""
    mode = operator.index(mode)
    if mode < 0:
        raise ValueError(f"mode must not be negative: {mode}")
    if mode > 0xFFFFFFFF:
        raise OverflowError("mode too large")
    return mode & 0o7777


def _layout_count(name: str, value) -> int:
    """A layout's chunk size or stripe count: a positive 32-bit integer
    (meta checks the rest: a power of two, the bounds, EINVAL)."""
    value = operator.index(value)
    if not 0 < value <= 0xFFFFFFFF:
        raise ValueError(f"{name} must be a positive 32-bit integer, not {value}")
    return value


def _reconnect(args):
    return Client(**args)


def _inode_from_state(state):
    """Unpickles a native Inode (what its __reduce__ names)."""
    return _native._inode_from_state(state)


# Native clients dropped after a fork: kept referenced so that they are never
# destroyed in the child.
_leaked: list = []


def _after_fork_in_child():
    for c in list(_clients):
        c._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
