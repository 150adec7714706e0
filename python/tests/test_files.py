"""File objects, namespace calls and read_batch through weft.Client."""

import errno
import io
import os
import pathlib
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch


def test_bytes_round_trip(client, root):
    data = os.urandom(3 * (1 << 20) + 12345)  # several chunks and a partial one
    with client.open(f"{root}/a.bin", "wb") as f:
        assert f.writable() and not f.readable() and f.seekable()
        for at in range(0, len(data), 100000):
            f.write(data[at:at + 100000])
    assert client.stat(f"{root}/a.bin").st_size == len(data)
    with client.open(f"{root}/a.bin", "rb") as f:
        assert f.read() == data
    with client.open(f"{root}/a.bin", "rb") as f:
        got = bytearray()
        while chunk := f.read(77777):
            got += chunk
        assert got == data
    assert client.read_file(f"{root}/a.bin") == data


def test_file_object_behaviour(client, root):
    p = f"{root}/b.bin"
    with client.open(p, "wb") as f:
        assert isinstance(f, io.BufferedWriter)
        with pytest.raises(io.UnsupportedOperation):
            f.fileno()
        with pytest.raises(io.UnsupportedOperation):
            f.read()
        f.write(b"0123456789")
    assert f.closed
    with pytest.raises(ValueError):
        f.write(b"x")
    raw = client.open(p, "rb", buffering=0)
    assert raw.readable() and not raw.writable() and raw.seekable()
    b = bytearray(4)
    assert raw.readinto(b) == 4 and b == b"0123"
    assert raw.readall() == b"456789"
    raw.close()
    raw.close()  # idempotent
    assert raw.closed
    with pytest.raises(ValueError):
        raw.read()


def test_seek_tell_partial_reads(client, root):
    p = f"{root}/c.bin"
    data = bytes(range(256)) * 8192  # 2 MiB
    client.write_file(p, data)
    with client.open(p, "rb") as f:
        assert f.tell() == 0
        assert f.seek(1000) == 1000
        assert f.read(10) == data[1000:1010]
        assert f.tell() == 1010
        assert f.seek(-10, io.SEEK_CUR) == 1000
        assert f.read(5) == data[1000:1005]
        assert f.seek(-100, io.SEEK_END) == len(data) - 100
        assert f.read() == data[-100:]
        assert f.read(10) == b""
        f.seek(len(data) + 10)
        assert f.read(10) == b""
        f.seek((1 << 20) - 3)  # across a chunk boundary
        assert f.read(6) == data[(1 << 20) - 3:(1 << 20) + 3]
        with pytest.raises(OSError):
            f.seek(-1)


def test_read_to_the_end_sees_what_another_client_wrote_since_the_open(client, cluster, root):
    import weft

    p = f"{root}/grows.log"
    client.write_file(p, b"")
    other = weft.connect(config=str(cluster / "client.toml"))
    with client.open(p, "rb") as r:
        other.write_file(p, b"hello")  # another client, after this open
        assert r.read() == b"hello"  # read(), not only read(n), asks past the known end
        with other.open(p, "ab") as w:
            w.write(b" world")
        assert r.read() == b" world"
        assert r.read() == b""


def test_flush_makes_writes_visible_to_other_clients(client, cluster, root):
    # io's buffered writers never called the raw file's flush(): the bytes
    # stayed in libweft's write-behind buffer until close.
    import weft

    other = weft.connect(config=str(cluster / "client.toml"))
    for mode, data in (("wb", b"step 1\n"), ("w+b", b"step 1\n"), ("w", "step 1\n")):
        p = f"{root}/log-{mode.replace('+', 'plus')}"
        with client.open(p, mode) as f:
            f.write(data)
            f.flush()
            assert other.read_file(p) == b"step 1\n", mode


def test_raw_file_errors_as_io_fileio(client, root):
    raw = client.open(f"{root}/raw", "wb", buffering=0)
    raw.close()
    with pytest.raises(ValueError):
        raw.flush()  # as io.FileIO's
    with client.open(f"{root}/raw", "rb", buffering=0) as raw:
        with pytest.raises(TypeError):
            raw.readinto(b"abcd")  # read-only: as io.FileIO's


def test_modes(client, root):
    p = f"{root}/m.bin"
    with client.open(p, "xb") as f:
        f.write(b"hello")
    with pytest.raises(FileExistsError) as e:
        client.open(p, "xb")
    assert p in str(e.value)
    with client.open(p, "ab") as f:
        f.write(b" world")
        assert f.tell() == 11
    assert client.read_file(p) == b"hello world"
    # Two appenders of one client never write over each other.
    with client.open(p, "ab", buffering=0) as a, client.open(p, "ab", buffering=0) as b:
        for i in range(3):
            a.write(b"[a%d]" % i)
            b.write(b"[b%d]" % i)
        assert (a.tell(), b.tell()) == (11 + 5 * 4, 11 + 6 * 4)  # each at the end of its own last write
    got = client.read_file(p)
    assert sorted(got[11 + 4 * k:15 + 4 * k] for k in range(6)) == [b"[a0]", b"[a1]", b"[a2]", b"[b0]", b"[b1]", b"[b2]"]
    assert got[:11] == b"hello world"
    with client.open(p, "wb") as f:
        f.write(b"hello world")
    with client.open(p, "r+b") as f:
        f.seek(6)
        f.write(b"WORLD")
        f.seek(0)
        assert f.read() == b"hello WORLD"
    with client.open(p, "wb") as f:  # truncates
        f.write(b"new")
    assert client.read_file(p) == b"new"
    with client.open(f"{root}/t.txt", "w") as f:
        f.write("line 1\nline 2\n")
    with client.open(f"{root}/t.txt", "r") as f:
        assert f.readlines() == ["line 1\n", "line 2\n"]
    with pytest.raises(ValueError):
        client.open(p, "rw")


def test_fsync_and_truncate(client, root):
    import weft

    p = f"{root}/s.bin"
    with client.open(p, "wb") as f:
        f.write(b"x" * 5000)
        weft.fsync(f)
        assert client.stat(p).st_size == 5000
        f.truncate(100)
    assert client.read_file(p) == b"x" * 100


def test_torch_save_load_through_open(client, root):
    obj = {"w": torch.randn(64, 33), "b": torch.arange(10), "meta": {"step": 7, "name": "x"}}
    with client.open(f"{root}/model.pt", "wb") as f:
        torch.save(obj, f)
    with client.open(f"{root}/model.pt", "rb") as f:
        back = torch.load(f)
    assert torch.equal(back["w"], obj["w"]) and torch.equal(back["b"], obj["b"])
    assert back["meta"] == obj["meta"]


def test_namespace(client, root):
    client.makedirs(f"{root}/x/y/z")
    client.makedirs(f"{root}/x/y/z", exist_ok=True)
    with pytest.raises(FileExistsError):
        client.makedirs(f"{root}/x/y/z")
    client.write_file(f"{root}/x/f1", b"abc")
    client.write_file(f"{root}/x/f2", b"")
    assert sorted(client.listdir(f"{root}/x")) == ["f1", "f2", "y"]
    st = client.stat(f"{root}/x/f1")
    assert stat.S_ISREG(st.st_mode) and st.st_size == 3 and st.st_mtime > 1e9 and st.st_nlink == 1
    assert st.st_mode & 0o777 == 0o644
    assert stat.S_ISDIR(client.stat(f"{root}/x/y").st_mode)
    assert client.exists(f"{root}/x/f1") and not client.exists(f"{root}/x/nope")
    assert not client.exists(f"{root}/x/f1/below")
    assert client.isdir(f"{root}/x") and client.isfile(f"{root}/x/f1")
    client.rename(f"{root}/x/f1", f"{root}/x/f3")
    assert not client.exists(f"{root}/x/f1") and client.read_file(f"{root}/x/f3") == b"abc"
    client.rename(f"{root}/x/f3", f"{root}/x/f2")  # replaces
    assert client.read_file(f"{root}/x/f2") == b"abc"
    client.write_file(f"{root}/x/f4", b"4")
    client.rename(f"{root}/x/f2", f"{root}/x/f4", exchange=True)
    assert client.read_file(f"{root}/x/f4") == b"abc" and client.read_file(f"{root}/x/f2") == b"4"
    with pytest.raises(FileExistsError):
        client.rename(f"{root}/x/f2", f"{root}/x/f4", noreplace=True)
    client.remove(f"{root}/x/f4")
    client.rmdir(f"{root}/x/y/z")
    assert sorted(client.listdir(f"{root}/x")) == ["f2", "y"]
    client.symlink("f2", f"{root}/x/link")
    assert stat.S_ISLNK(client.lstat(f"{root}/x/link").st_mode)
    assert client.readlink(f"{root}/x/link") == "f2"
    assert client.read_file(f"{root}/x/link") == b"4"
    client.rmtree(f"{root}/x")
    assert not client.exists(f"{root}/x")


def test_a_trailing_slash_names_a_directory_in_remove_and_rename(client, root):
    client.write_file(f"{root}/f", b"x")
    client.mkdir(f"{root}/d")
    with pytest.raises(NotADirectoryError):
        client.remove(f"{root}/f/")
    with pytest.raises(NotADirectoryError):
        client.rename(f"{root}/f/", f"{root}/g")
    with pytest.raises(NotADirectoryError):
        client.rename(f"{root}/f", f"{root}/g/")
    assert client.read_file(f"{root}/f") == b"x"
    client.rename(f"{root}/d/", f"{root}/e/")  # a directory may be named so
    client.rmdir(f"{root}/e/")
    assert sorted(client.listdir(root)) == ["f"]


def test_read_file_holds_the_file_once_in_memory(client, root):
    import tracemalloc
    data = os.urandom(1 << 16) * 512  # 32 MiB
    client.write_file(f"{root}/big", data)
    tracemalloc.start()
    try:
        back = client.read_file(f"{root}/big")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert back == data
    assert peak < 1.5 * len(data), f"peak {peak} bytes for a read of {len(data)}"  # it was twice the file


def test_path_mutations_go_where_the_path_leads_after_another_client_moved_a_directory(client, cluster, root):
    # Each step: this client caches "a" and "b", another moves "a" away and
    # makes a new "a/b", then this client mutates by path at once (within
    # the cache's second). Each used to land in the moved tree.
    import weft
    other = weft.connect(config=str(cluster / "client.toml"))
    moves = iter(range(20))

    def cache_then_move():
        client.write_file(f"{root}/a/b/c{next(moves)}", b"x")  # caches "a" and "b"
        other.rename(f"{root}/a", f"{root}/a.old{next(moves)}")
        other.makedirs(f"{root}/a/b")

    client.makedirs(f"{root}/a/b")
    cache_then_move()
    client.mkdir(f"{root}/a/b/m")
    assert other.listdir(f"{root}/a/b") == ["m"]
    cache_then_move()
    client.symlink("t", f"{root}/a/b/s")
    assert other.listdir(f"{root}/a/b") == ["s"]
    cache_then_move()
    other.write_file(f"{root}/a/b/f", b"new")
    with pytest.raises(FileNotFoundError):
        client.remove(f"{root}/a/b/c4")  # it is in the moved tree
    cache_then_move()
    other.write_file(f"{root}/a/b/f", b"new")
    client.rename(f"{root}/a/b/f", f"{root}/a/b/g")
    assert other.listdir(f"{root}/a/b") == ["g"] and other.read_file(f"{root}/a/b/g") == b"new"
    cache_then_move()
    client.makedirs(f"{root}/a/b/n/o")
    assert other.listdir(f"{root}/a/b") == ["n"] and other.listdir(f"{root}/a/b/n") == ["o"]
    cache_then_move()
    other.makedirs(f"{root}/a/b/x")
    client.rmtree(f"{root}/a/b")
    assert not other.exists(f"{root}/a/b")
    assert sorted(other.listdir(f"{root}/a.old11/b")) == ["c10", "n"], "emptied the moved tree"
    # What the cached check saw is a directory; what is there now, a file.
    client.makedirs(f"{root}/a2/b")
    client.write_file(f"{root}/a2/b/c", b"x")  # caches "a2" and "b"
    other.rename(f"{root}/a2", f"{root}/a2.old")
    other.makedirs(f"{root}/a2")
    other.write_file(f"{root}/a2/b", b"a file")
    with pytest.raises(NotADirectoryError):
        client.rmtree(f"{root}/a2/b")
    assert other.read_file(f"{root}/a2/b") == b"a file"


def test_write_file_with_data_it_cannot_take_leaves_the_file(client, root):
    client.write_file(f"{root}/keep", b"precious")
    with pytest.raises(TypeError):
        client.write_file(f"{root}/keep", "text, not bytes")
    assert client.read_file(f"{root}/keep") == b"precious"


def test_rmtree_refuses_the_root(client, root):
    # Relative names resolve from the root: rmtree(os.path.dirname("x.pt")),
    # i.e. rmtree(""), used to empty the whole cluster.
    keep = f"/keep-{os.path.basename(root)}"
    client.write_file(keep, b"precious")
    client.write_file(f"{root}/f", b"x")
    client.symlink("/", f"{root}/up")
    try:
        for p in ["", ".", "./", "..", "/", "//", "/.", "/..", "t/..", f"{root}/..", f"{root}/.", f"{root}/up/.."]:
            with pytest.raises(OSError) as e:
                client.rmtree(p)
            assert client.read_file(keep) == b"precious", p  # the error came before any removal
            assert e.value.errno in (errno.ENOENT, errno.EINVAL), (p, e.value)
        with pytest.raises(OSError) as e:
            client.rmtree(f"{root}/up")  # a symlink to the root: refused as a symlink
        assert e.value.errno == errno.ELOOP
        assert client.read_file(keep) == b"precious"
        assert client.read_file(f"{root}/f") == b"x"
        with pytest.raises(NotADirectoryError):
            client.rmtree(f"{root}/f")  # as shutil.rmtree: a file is not removed
        assert client.read_file(f"{root}/f") == b"x"
        # Through a symlink above it: fine. (Not of `root` through `up`, which
        # is inside it: once `up` is gone, the path names nothing, as on Linux.)
        client.mkdir(f"{root}/sub")
        client.write_file(f"{root}/sub/g", b"y")
        client.rmtree(f"{root}/up/{root}/sub")
        assert not client.exists(f"{root}/sub")
        assert client.read_file(f"{root}/f") == b"x"
    finally:
        client.remove(keep)


def test_non_utf8_names_and_path_types(client, root):
    # A name need not be UTF-8: str names come decoded as os.fsdecode does
    # (surrogateescape, so they name the file again), bytes paths list bytes,
    # as os.listdir; str, bytes and os.PathLike paths are accepted everywhere.
    d = f"{root}/d"
    bd = os.fsencode(d)
    client.makedirs(bd + b"/sub\xfe")
    client.write_file(bd + b"/\xff", b"ff")
    client.write_file(bd + b"/sub\xfe/in", b"in")
    client.symlink(b"\xff", bd + b"/link")
    ff, sub = os.fsdecode(b"\xff"), os.fsdecode(b"sub\xfe")
    assert sorted(client.listdir(d)) == sorted([ff, sub, "link"])
    assert sorted(client.listdir(bd)) == sorted([b"\xff", b"sub\xfe", b"link"])
    assert sorted(client.listdir(pathlib.PurePosixPath(d))) == sorted([ff, sub, "link"])
    entries = {e.name: e for e in client.scandir(d)}
    assert entries[ff].path == f"{d}/{ff}" and entries[ff].is_file()
    assert client.read_file(entries[ff].path) == b"ff"
    bentries = {e.name: e for e in client.scandir(bd)}
    assert bentries[b"sub\xfe"].path == bd + b"/sub\xfe" and bentries[b"sub\xfe"].is_dir()
    walked = [(top, sorted(dirs), sorted(files)) for top, dirs, files in client.walk(d)]
    assert walked == [(d, [sub], sorted([ff, "link"])), (f"{d}/{sub}", [], ["in"])]
    assert [t for t, _, _ in client.walk(bd)] == [bd, bd + b"/sub\xfe"]
    assert client.readlink(f"{d}/link") == ff and client.readlink(bd + b"/link") == b"\xff"
    assert client.read_file(f"{d}/link") == b"ff"
    # A message or path that is not UTF-8 still makes an OSError.
    with pytest.raises(NotADirectoryError) as e:
        client.stat(bd + b"/\xff/below")
    assert e.value.filename == f"{d}/{ff}/below"
    # os.PathLike everywhere.
    p = pathlib.PurePosixPath(d) / "p"
    client.write_file(p, b"p")
    assert client.read_file(p) == b"p" and client.stat(p).st_size == 1 and client.exists(p)
    assert client.isfile(p) and client.isdir(pathlib.PurePosixPath(d))
    client.rename(p, pathlib.PurePosixPath(d) / "q")
    client.remove(pathlib.PurePosixPath(d) / "q")
    client.mkdir(pathlib.PurePosixPath(d) / "e")
    client.rmdir(pathlib.PurePosixPath(d) / "e")
    # The empty path names nothing (libweft would take it for the root).
    for fn in (client.stat, client.listdir, client.read_file):
        with pytest.raises(FileNotFoundError):
            fn("")
    assert not client.exists("")
    with pytest.raises(TypeError):
        client.stat(3)
    client.rmtree(pathlib.PurePosixPath(d))
    assert not client.exists(d)


def test_read_batch(client, root):
    files = {f"{root}/r{i}": os.urandom(i * 70001) for i in range(6)}
    for p, d in files.items():
        client.write_file(p, d)
    reqs = [(p, 0, len(d)) for p, d in files.items()]
    reqs += [(f"{root}/r5", 100, 1000), (f"{root}/r3", 200000, 50000), (f"{root}/r2", 0, None)]
    out = client.read_batch(reqs)
    assert len(out) == len(reqs)
    for (p, off, n), a in zip(reqs, out):
        assert isinstance(a, np.ndarray) and a.dtype == np.uint8
        d = files[p]
        want = d[off:] if n is None else d[off:off + n]
        assert a.tobytes() == want, (p, off, n)
    # The arrays are the buffers the native code read into: zero-copy views work.
    assert out[0].base is None or isinstance(out[0].base, np.ndarray)
    t = torch.from_numpy(out[5])
    assert t.numel() == len(files[f"{root}/r5"])
    with pytest.raises(FileNotFoundError) as e:
        client.read_batch([(f"{root}/r1", 0, 10), (f"{root}/missing", 0, 10)])
    assert f"{root}/missing" in str(e.value)
    res = client.read_batch([(f"{root}/r1", 0, 10), (f"{root}/missing", 0, 10)], errors="return")
    assert res[0].tobytes() == files[f"{root}/r1"][:10] and isinstance(res[1], FileNotFoundError)


def test_fork_child_reconnects(client, root):
    client.write_file(f"{root}/before", b"parent")
    f = client.open(f"{root}/before", "rb", buffering=0)
    pid = os.fork()
    if pid == 0:  # child: its own connection; files from before the fork are unusable
        code = 1
        try:
            ok = client.read_file(f"{root}/before") == b"parent"
            client.write_file(f"{root}/child", b"child")
            try:
                f.read()
                ok = False
            except OSError:
                pass
            code = 0 if ok else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert f.read() == b"parent"
    f.close()
    assert client.read_file(f"{root}/child") == b"child"


def test_statahead_client(client, cluster, root):
    import pickle

    import weft

    sa = weft.connect(config=str(cluster / "client.toml"), statahead_ttl=60)
    for i in range(5):
        client.write_file(f"{root}/f{i}", bytes([i]) * (100 + i))
    for i in range(5):  # two opens that ask meta list the directory; the rest come from the listing
        assert sa.read_file(f"{root}/f{i}") == bytes([i]) * (100 + i)
    client.write_file(f"{root}/f2", b"longer now" * 100)  # another client replaces the content
    def listed_size(c, name):
        nf = c.native.open(f"{root}/{name}", os.O_RDONLY, 0)
        try:
            return nf.size()
        finally:
            nf.close()

    assert listed_size(sa, "f2") == 102, "answered from the listing (60 s old at most)"
    assert client.read_file(f"{root}/f2") == b"longer now" * 100
    copy = pickle.loads(pickle.dumps(sa))  # a new connection with the same options
    for i in range(5):
        assert copy.read_file(f"{root}/f{i}")  # lists the directory again, after f2 grew
    client.write_file(f"{root}/f1", b"x" * 3000)
    assert listed_size(copy, "f1") == 101, "the copy answers from its own listing too"
    sa.write_file(f"{root}/f3", b"mine")  # a change through it drops its listings
    assert sa.read_file(f"{root}/f3") == b"mine"
    with pytest.raises(ValueError):
        weft.connect(config=str(cluster / "client.toml"), statahead_ttl=-1)
    with pytest.raises(ValueError):
        weft.connect(config=str(cluster / "client.toml"), statahead_ttl=float("inf"))


def test_early_reads(client, cluster, root):
    import pickle

    import weft

    for i in range(6):
        client.write_file(f"{root}/e{i}", bytes([i]) * (3000 + i))
    on = weft.connect(config=str(cluster / "client.toml"))
    off = weft.connect(config=str(cluster / "client.toml"), early_read_bytes=0)
    for c in (on, off):
        for i in range(6):  # two opens that ask meta list the directory; later ones read early
            assert c.read_file(f"{root}/e{i}") == bytes([i]) * (3000 + i)
    assert on.native.stats()["early_reads_kept"] >= 3
    assert off.native.stats() == {"early_reads": 0, "early_reads_kept": 0}
    client.write_file(f"{root}/e4", b"changed" * 100)  # another client rewrites one: meta's answer differs
    assert on.read_file(f"{root}/e4") == b"changed" * 100
    copy = pickle.loads(pickle.dumps(off))  # the option travels with the client
    for i in range(6):
        copy.read_file(f"{root}/e{i}")
    assert copy.native.stats()["early_reads"] == 0
    with pytest.raises(ValueError):
        weft.connect(config=str(cluster / "client.toml"), early_read_bytes=-2)


def test_native_file_dropped_without_close_keeps_its_data(client, root):
    # The native File object dropped with writes still buffered (no close):
    # it flushes and closes itself; this used to abort the interpreter.
    import gc
    import time
    data = os.urandom(2 * (1 << 20) + 777)
    nf = client.native.open(f"{root}/dropped.bin", os.O_CREAT | os.O_WRONLY, 0o644)
    nf.pwrite(data, 0)
    del nf
    gc.collect()
    for _ in range(250):  # sends in flight hold it a moment longer
        if client.stat(f"{root}/dropped.bin").st_size == len(data):
            break
        time.sleep(0.02)
    assert client.read_file(f"{root}/dropped.bin") == data


def test_native_file_opened_write_only_refuses_reads(client, root):
    # As read(2) on a descriptor opened O_WRONLY: EBADF, the buffer untouched.
    client.write_file(f"{root}/wo.bin", b"x" * 100)
    nf = client.native.open(f"{root}/wo.bin", os.O_WRONLY, 0)
    assert nf.writable and not nf.readable
    buf = bytearray(b"y" * 10)
    with pytest.raises(OSError) as e:
        nf.pread(buf, 0)
    assert e.value.errno == errno.EBADF
    assert buf == b"y" * 10
    nf.close()
    nf = client.native.open(f"{root}/wo.bin", os.O_RDWR, 0)
    assert nf.writable and nf.readable
    assert nf.pread(buf, 0) == 10 and buf == b"x" * 10
    nf.close()


_EXIT_SCRIPT = """
import os, sys, threading, time
import weft
c = weft.connect()
root = sys.argv[1]
c.write_file(root + "/big", os.urandom(4 << 20))
def busy(k):
    while True:
        c.read_file(root + "/big")
        c.write_file(f"{root}/w{k}", b"w" * (1 << 20))
        c.listdir(root)
for k in range(3):
    threading.Thread(target=busy, args=(k,), daemon=True).start()
def last_write():  # not a daemon: Python waits for it before exiting
    time.sleep(0.3)
    c.write_file(root + "/last", b"done")
threading.Thread(target=last_write).start()
time.sleep(0.5)
"""


def test_exit_with_daemon_threads_in_calls(client, cluster, root):
    # A daemon thread inside a call when the interpreter exits used to abort
    # the process ("terminate called without an active exception", rc 134):
    # re-taking the GIL during finalization ends the thread by unwinding
    # through a noexcept destructor.
    env = dict(os.environ, WEFT_CONFIG=str(cluster / "client.toml"))
    for i in range(4):
        d = f"{root}/{i}"
        client.makedirs(d)
        r = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, d], capture_output=True, text=True, timeout=120,
                           env=env)
        assert r.returncode == 0, (i, r.returncode, r.stderr[-2000:])
        assert client.read_file(f"{d}/last") == b"done"


_FORK_WHILE_IMPORTING = r"""
import importlib.machinery, os, signal, sys, threading
import weft
c = weft.connect(config=sys.argv[1])
ready, release = threading.Event(), threading.Event()

class Held:  # another thread's import of numpy, under way (its module lock held) when the process forks
    def find_spec(self, name, path=None, target=None):
        if name != "numpy":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader

        class Loader:
            def create_module(self, spec):
                return real.create_module(spec)

            def exec_module(self, module):
                ready.set()
                release.wait()
                real.exec_module(module)

        spec.loader = Loader()
        return spec

sys.meta_path.insert(0, Held())
t = threading.Thread(target=lambda: (__import__("numpy"), ready.set()))
t.start()
ready.wait()
pid = os.fork()
if pid == 0:
    signal.alarm(30)  # a hung child dies instead
    os._exit(0 if len(c.read_batch([(sys.argv[2], 0, None)])[0]) == 3 else 1)
release.set()
t.join()
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_read_batch_in_a_child_forked_during_an_import(client, cluster, root):
    # read_batch imported numpy when first called: in a child forked while
    # another thread imported it, that waited forever for the import's lock.
    client.write_file(f"{root}/f", b"abc")
    r = subprocess.run([sys.executable, "-c", _FORK_WHILE_IMPORTING, str(cluster / "client.toml"), f"{root}/f"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == "0\n", r.stdout + r.stderr[-2000:]


def test_open_files_keep_their_data_unless_holds_are_off(client, cluster, root):
    # A file removed elsewhere while open here keeps its data for a client
    # that holds its open files (the default, POSIX), and the reads of one
    # that does not (hold_open_files=False) fail with ESTALE once meta's
    # chunk GC collects the file: never zeros. "kept" is created first (a
    # lower inode: a GC pass looks at it before "dropped"), so once the
    # unheld file is collected the GC has looked at the held one too.
    import errno
    import pickle
    import time

    import weft

    size = 3 << 20
    kept_data, dropped_data = os.urandom(size), os.urandom(size)
    client.write_file(f"{root}/kept", kept_data)
    client.write_file(f"{root}/dropped", dropped_data)
    unholding = weft.connect(config=str(cluster / "client.toml"), hold_open_files=False)
    assert pickle.loads(pickle.dumps(unholding))._args["hold_open_files"] is False, "copies keep the option"
    kept = client.native.open(f"{root}/kept", os.O_RDONLY, 0)
    dropped = unholding.native.open(f"{root}/dropped", os.O_RDONLY, 0)
    buf = bytearray(4096)
    assert kept.pread(buf, 0) == 4096 and bytes(buf) == kept_data[:4096]
    assert dropped.pread(buf, 0) == 4096 and bytes(buf) == dropped_data[:4096]
    client.remove(f"{root}/kept")
    client.remove(f"{root}/dropped")
    deadline = time.time() + 60
    while True:
        try:
            n = dropped.pread(buf, 2 << 20)
            assert n == 4096 and bytes(buf) == dropped_data[2 << 20:(2 << 20) + 4096], "read wrong bytes"
        except OSError as e:
            assert e.errno == errno.ESTALE, e
            break
        assert time.time() < deadline, "the unheld file was never collected"
        time.sleep(0.2)
    time.sleep(2.5)  # GC passes go from the queue's front, 1 s apart once they collect nothing
    whole = bytearray(size)
    got = 0
    while got < size:
        n = kept.pread(memoryview(whole)[got:], got)
        assert n > 0
        got += n
    assert bytes(whole) == kept_data, "a held file lost its data while open"
    kept.close()
    dropped.close()


def test_scandir_entries_behave_as_os_direntry(client, root):
    # Symlinks are followed by is_dir/is_file/stat unless follow_symlinks=False;
    # a dangling one is neither; walk lists a linked directory without entering it.
    d = f"{root}/scan"
    client.makedirs(f"{d}/sub")
    client.write_file(f"{d}/f", b"12345")
    client.write_file(f"{d}/sub/in", b"x")
    client.symlink("f", f"{d}/to-f")
    client.symlink("sub", f"{d}/to-sub")
    client.symlink("nothing", f"{d}/dangling")
    e = {x.name: x for x in client.scandir(d)}
    assert e["f"].inode() == client.inode(f"{d}/f").ino
    assert e["to-f"].inode() == client.inode(f"{d}/to-f", follow_symlinks=False).ino
    assert os.fspath(e["f"]) == f"{d}/f"
    assert e["to-f"].is_file() and not e["to-f"].is_file(follow_symlinks=False)
    assert e["to-f"].is_symlink() and e["to-f"].stat().st_size == 5
    assert stat.S_ISLNK(e["to-f"].stat(follow_symlinks=False).st_mode)
    assert e["to-sub"].is_dir() and not e["to-sub"].is_dir(follow_symlinks=False)
    assert not e["dangling"].is_file() and not e["dangling"].is_dir()
    with pytest.raises(FileNotFoundError):
        e["dangling"].stat()
    assert e["dangling"].stat(follow_symlinks=False).st_size == len("nothing")
    walked = {top: (sorted(dirs), sorted(files)) for top, dirs, files in client.walk(d)}
    assert walked == {d: (["sub", "to-sub"], ["dangling", "f", "to-f"]), f"{d}/sub": ([], ["in"])}


def test_path_predicates_are_false_where_the_caller_cannot_look(client, root, as_nobody):
    # As os.path.exists/isdir/isfile: a name behind a directory the caller
    # may not search is not there for it (False, not PermissionError).
    client.mkdir(f"{root}/closed", 0o700)
    client.mkdir(f"{root}/closed/sub")
    client.write_file(f"{root}/closed/f", b"s")
    r = as_nobody(f"""
import weft
c = weft.connect(config=conf)
print(c.exists({root + '/closed/f'!r}), c.isfile({root + '/closed/f'!r}), c.isdir({root + '/closed/sub'!r}),
      c.exists({root + '/closed'!r}))
""")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == ["False", "False", "False", "True"], r.stdout + r.stderr


def test_scandir_of_a_directory_the_caller_may_not_search_gives_names_and_types_only(client, root, as_nobody):
    # As os.scandir on Linux: read permission without search permission lists
    # names, inode numbers and types; stat() of an entry is refused.
    d = f"{root}/listonly"
    client.mkdir(d, 0o744)
    client.write_file(f"{d}/f", b"12345")
    client.mkdir(f"{d}/sub")
    client.symlink("secret-target", f"{d}/link")
    r = as_nobody(f"""
import weft
c = weft.connect(config=conf)
e = {{x.name: x for x in c.scandir({d!r})}}
print(sorted(e), e["f"].inode(), e["f"].is_file(), e["sub"].is_dir(follow_symlinks=False),
      e["link"].is_symlink())
for name in sorted(e):
    try:
        e[name].stat(follow_symlinks=False)
        print(name, "stat given")
    except PermissionError:
        print(name, "refused")
""")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    ino = client.inode(f"{d}/f").ino
    assert lines[0] == f"['f', 'link', 'sub'] {ino} True True True", r.stdout + r.stderr
    assert lines[1:] == ["f refused", "link refused", "sub refused"], r.stdout + r.stderr
