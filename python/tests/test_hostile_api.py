"""Misuse of the Python API: wrong types and values, closed and pre-fork
objects, odd paths, threads. Each must give a clear Python exception (of the
type Python's own os/io calls give) or work, never crash, hang or return
wrong data. Probes that crashed the interpreter run in a subprocess, so that
a regression fails the test instead of killing the run."""

import errno
import io
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest


def _run_script(script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs `script` in a fresh interpreter (WEFT_CONFIG and PYTHONPATH inherited)."""
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)


def _ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, f"exit {r.returncode}\nstdout: {r.stdout[-3000:]}\nstderr: {r.stderr[-3000:]}"


# ---------------------------------------------------------------------------
# Offsets and lengths


def test_native_offsets_negative_huge_float(client, root):
    import numpy as np

    client.write_file(f"{root}/f", b"0123456789")
    nf = client.native.open(os.fsencode(f"{root}/f"), os.O_RDWR, 0)
    try:
        # Negative: EINVAL, as os.pread / io.FileIO.truncate (was a TypeError
        # "incompatible function arguments").
        for call in (lambda: nf.pread(bytearray(4), -1), lambda: nf.pwrite(b"ab", -1),
                     lambda: nf.pread_bytes(4, -1), lambda: nf.pread_bytes(-1, 0), lambda: nf.truncate(-1)):
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.EINVAL, e.value
            assert not isinstance(e.value, TypeError)
        # Past 64 bits: OverflowError.
        for call in (lambda: nf.pread(bytearray(4), 2**64), lambda: nf.pwrite(b"ab", 2**64),
                     lambda: nf.pread_bytes(4, 2**64), lambda: nf.truncate(2**64)):
            with pytest.raises(OverflowError):
                call()
        # As os.read: a length past ssize_t is OverflowError (was OSError EIO).
        with pytest.raises(OverflowError):
            nf.pread_bytes(2**63, 0)
        # Not integers: TypeError.
        for bad in (1.5, None, "1", b"1"):
            with pytest.raises(TypeError):
                nf.pread(bytearray(4), bad)
            with pytest.raises(TypeError):
                nf.pwrite(b"x", bad)
            with pytest.raises(TypeError):
                nf.truncate(bad)
        # Large but valid offsets: past the maximum size a write is EFBIG, a read is empty.
        for off in (2**63, 2**64 - 1):
            assert nf.pread(bytearray(4), off) == 0
            assert nf.pread_bytes(4, off) == b""
            with pytest.raises(OSError) as e:
                nf.pwrite(b"x", off)
            assert e.value.errno == errno.EFBIG
        # numpy integers and bools are integers.
        buf = bytearray(4)
        assert nf.pread(buf, np.int64(2)) == 4 and buf == b"2345"
        assert nf.pread_bytes(np.uint32(3), True) == b"123"
        assert nf.pwrite(b"AB", np.int32(8)) == 2
        # Nothing above changed the file but that write.
        nf.flush()
        assert nf.pread_bytes(100, 0) == b"01234567AB"
    finally:
        nf.close()
    assert client.read_file(f"{root}/f") == b"01234567AB"


def test_weftfile_seek_and_truncate_arguments(client, root):
    client.write_file(f"{root}/f", b"0123456789")
    with client.open(f"{root}/f", "r+b", buffering=0) as f:
        # As io.FileIO: refused at seek, not at the next read.
        for bad in (1.5, None, "3"):
            with pytest.raises(TypeError):
                f.seek(bad)
        with pytest.raises(TypeError):
            f.seek(0, 1.0)
        with pytest.raises(OverflowError):
            f.seek(2**64)
        with pytest.raises(OverflowError):
            f.seek(2**63)
        with pytest.raises(OSError) as e:
            f.seek(-1)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(ValueError):
            f.seek(0, 7)
        assert f.tell() == 0
        assert f.read(4) == b"0123"
        with pytest.raises(TypeError):
            f.truncate(1.5)
        with pytest.raises(OSError) as e:
            f.truncate(-1)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(OverflowError):
            f.truncate(2**64)
        with pytest.raises(OSError) as e:
            f.truncate(2**63)  # past the cluster's maximum file size
        assert e.value.errno == errno.EFBIG
        assert f.size() == 10
        f.seek(2**40)
        assert f.read(10) == b""
        assert f.truncate(6) == 6
    assert client.read_file(f"{root}/f") == b"012345"


def test_read_batch_bad_requests(client, root):
    client.write_file(f"{root}/f", b"abcdef")
    with pytest.raises(ValueError):
        client.read_batch([(f"{root}/f", 0, 1)], errors="bogus")
    with pytest.raises(OSError) as e:
        client.read_batch([(f"{root}/f", -1, 3)])
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OverflowError):
        client.read_batch([(f"{root}/f", 2**64, 3)])
    with pytest.raises(TypeError):
        client.read_batch([(f"{root}/f", 0.5, 3)])
    with pytest.raises(TypeError):
        client.read_batch([(f"{root}/f", 0, 2.5)])
    with pytest.raises(ValueError):
        client.read_batch([(f"{root}/f", 0)])
    assert [bytes(a) for a in client.read_batch([(f"{root}/f", 1, 3), (f"{root}/f", 4, None), (f"{root}/f", 9, 2)])] \
        == [b"bcd", b"ef", b""]
    n = client.inode(f"{root}/f")
    with pytest.raises(OSError) as e:
        client.read_batch_into([(n.ino, -1, bytearray(2), n, n.size)])
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OverflowError):
        client.read_batch_into([(n.ino, 2**64, bytearray(2), n, n.size)])
    with pytest.raises(TypeError):
        client.read_batch_into([(n.ino, 0, b"ro", n, n.size)])
    with pytest.raises(TypeError):
        client.read_batch_into(None)
    # Layouts the cluster never makes: an error per read, no crash.
    for layout in ((0, 0, 0, 0, 0), (1 << 20, 0, 0, 0, 0), (3, 1, 0, 0, 0), (1 << 20, 2**32 - 1, 0, 0, 0)):
        (r,) = client.read_batch_into([(n.ino, 0, bytearray(4), layout, 6)])
        assert isinstance(r, tuple) and r[0] == errno.EINVAL, (layout, r)
    buf = bytearray(3)
    assert client.read_batch_into([(n.ino, 2, buf, n, n.size)]) == [3] and buf == b"cde"


# ---------------------------------------------------------------------------
# Buffers


def test_buffers(client, root):
    import numpy as np

    client.write_file(f"{root}/f", bytes(range(16)))
    with client.open(f"{root}/f", "r+b", buffering=0) as f:
        ro = np.zeros(8, np.uint8)
        ro.flags.writeable = False
        for bad in (b"abcd", memoryview(b"abcd"), ro):
            with pytest.raises((TypeError, ValueError)):
                f.readinto(bad)
        for bad in (memoryview(bytearray(8))[::2], np.zeros(8, np.uint8)[::2], np.zeros((2, 4), np.uint8, order="F")):
            with pytest.raises((TypeError, ValueError, BufferError)):
                f.readinto(bad)
        for bad in (None, "abc", 5, 1.5):
            with pytest.raises(TypeError):
                f.readinto(bad)
            with pytest.raises(TypeError):
                f.write(bad)
        with pytest.raises((TypeError, BufferError)):
            f.write(memoryview(bytearray(8))[::2])
        assert f.tell() == 0
        assert f.readinto(np.zeros(0, np.uint8)) == 0
        a = np.zeros(2, np.float32)  # another dtype: its bytes
        assert f.readinto(a) == 8
        assert a.tobytes() == bytes(range(8))
        m = np.zeros((2, 2), np.uint8)
        assert f.readinto(m) == 4 and m.tobytes() == bytes(range(8, 12))
        f.seek(0)
        assert f.write(np.arange(2, dtype=np.uint16)) == 4
        assert f.write(memoryview(b"xy")) == 2
    assert client.read_file(f"{root}/f") == b"\0\0\1\0xy" + bytes(range(6, 16))
    with pytest.raises(TypeError):
        client.write_file(f"{root}/f", "text")
    with pytest.raises(TypeError):
        client.write_file(f"{root}/f", None)
    assert client.read_file(f"{root}/f") == b"\0\0\1\0xy" + bytes(range(6, 16))  # left as it was


# ---------------------------------------------------------------------------
# Modes and layouts


def test_directory_modes_are_checked_as_os_mkdir(client, root):
    # Not an integer: TypeError, as os.mkdir; negative: ValueError; past 32
    # bits: OverflowError (all three were pybind11's TypeError, whose message
    # names C++ types). Nothing is made for any of them.
    for mode, exc in (("755", TypeError), (7.5, TypeError), (None, TypeError), (-1, ValueError),
                      (2 ** 32, OverflowError), (2 ** 70, OverflowError)):
        with pytest.raises(exc):
            client.mkdir(f"{root}/m", mode)
        with pytest.raises(exc):
            client.makedirs(f"{root}/n/o", mode)
    assert client.listdir(root) == []
    client.mkdir(f"{root}/e")
    with pytest.raises(ValueError):  # checked although the directory exists (as os.makedirs's TypeError)
        client.makedirs(f"{root}/e", -1, exist_ok=True)
    client.rmdir(f"{root}/e")
    # A stat's st_mode works: its type bits are dropped, as os.mkdir does.
    client.mkdir(f"{root}/m", 0o40750)
    assert client.stat(f"{root}/m").st_mode & 0o7777 == 0o750


def test_layout_counts_are_positive_32_bit_integers(client, root):
    client.mkdir(f"{root}/d")
    before = client.get_layout(f"{root}/d")
    for kwargs, exc in (({"chunk_bytes": 0}, ValueError), ({"chunk_bytes": -1}, ValueError),
                        ({"chunk_bytes": 2 ** 32}, ValueError), ({"stripe_count": 0}, ValueError),
                        ({"stripe_count": -4}, ValueError), ({"stripe_count": 2 ** 40}, ValueError),
                        ({"chunk_bytes": 1.5}, TypeError), ({"stripe_count": "2"}, TypeError)):
        with pytest.raises(exc):
            client.set_layout(f"{root}/d", **kwargs)
    assert client.get_layout(f"{root}/d") == before, "a refused set_layout changed the layout"
    # In range but not a layout meta takes (not a power of two): EINVAL.
    with pytest.raises(OSError) as e:
        client.set_layout(f"{root}/d", chunk_bytes=3 * 4096 + 1)
    assert e.value.errno == errno.EINVAL
    client.set_layout(f"{root}/d", stripe_count=1)
    assert client.get_layout(f"{root}/d")["stripe_count"] == 1


# ---------------------------------------------------------------------------
# Paths


def test_nul_paths_are_value_errors(client, root):
    client.write_file(f"{root}/f", b"x")
    bad = f"{root}/a\0b"
    for call in (lambda: client.open(bad, "wb"), lambda: client.stat(bad), lambda: client.mkdir(bad),
                 lambda: client.makedirs(bad), lambda: client.listdir(bad), lambda: client.remove(bad),
                 lambda: client.rename(f"{root}/f", bad), lambda: client.rename(bad, f"{root}/g"),
                 lambda: client.symlink(f"{root}/f\0x", f"{root}/l"), lambda: client.symlink("x", bad),
                 lambda: client.readlink(bad), lambda: client.read_file(os.fsencode(bad)),
                 lambda: client.read_batch([(bad, 0, 1)])):
        # As os calls: ValueError (was OSError EINVAL).
        with pytest.raises(ValueError, match="null"):
            call()
    assert not client.exists(bad) and not client.isfile(bad) and not client.isdir(bad)
    assert sorted(client.listdir(root)) == ["f"]


def test_empty_long_and_undecodable_paths(client, root):
    for call in (lambda: client.open("", "rb"), lambda: client.stat(""), lambda: client.listdir(""),
                 lambda: client.remove(""), lambda: client.rmtree("")):
        with pytest.raises(FileNotFoundError):
            call()
    for bad in (None, 3, 1.5):
        with pytest.raises(TypeError):
            client.stat(bad)
        with pytest.raises(TypeError):
            client.open(bad, "rb")
    # A name longer than 255 bytes: ENAMETOOLONG; 255 works.
    with pytest.raises(OSError) as e:
        client.write_file(f"{root}/{'n' * 256}", b"x")
    assert e.value.errno == errno.ENAMETOOLONG
    client.write_file(f"{root}/{'n' * 255}", b"255")
    assert client.read_file(f"{root}/{'n' * 255}") == b"255"
    # A path longer than 4096 bytes (weft has no PATH_MAX): it works, whole.
    deep = root + "/" + "/".join(["d" * 200] * 22)
    assert len(deep) > 4096
    client.makedirs(deep)
    client.write_file(f"{deep}/f", b"deep")
    assert client.read_file(f"{deep}/f") == b"deep"
    # Names that are not UTF-8 round-trip (str through surrogateescape, bytes as is).
    raw = os.fsencode(root) + b"/\xff\xfe"
    client.write_file(raw, b"raw")
    assert os.fsdecode(b"\xff\xfe") in client.listdir(root)
    assert b"\xff\xfe" in client.listdir(os.fsencode(root))
    assert client.read_file(os.fsdecode(raw)) == b"raw"
    with pytest.raises(FileNotFoundError) as e:
        client.stat(raw + b"x")
    assert e.value.filename == os.fsdecode(raw + b"x")
    # The root itself is never removed or renamed.
    for call in (lambda: client.remove("/"), lambda: client.rmdir("/"), lambda: client.rename("/", f"{root}/x"),
                 lambda: client.rmtree("/")):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.EINVAL


def test_open_bad_arguments(client, root):
    client.write_file(f"{root}/f", b"data")
    for mode in ("", "rw", "rr", "q", "rbt", b"rb"):
        with pytest.raises(ValueError):
            client.open(f"{root}/f", mode)
    with pytest.raises(TypeError):
        client.open(f"{root}/f", None)
    with pytest.raises(ValueError):
        client.open(f"{root}/f", "rb", buffering=-5)
    with pytest.raises(TypeError):
        client.open(f"{root}/f", "rb", buffering=1.5)
    with pytest.raises(TypeError):
        client.open(f"{root}/g", "wb", perm="644")
    with pytest.raises(TypeError):
        client.open(f"{root}/g", "wb", perm=-1)
    with pytest.raises(LookupError):
        client.open(f"{root}/f", "r", encoding="no-such-codec")
    assert client.read_file(f"{root}/f") == b"data"


# ---------------------------------------------------------------------------
# Closed, pickled, unconstructed objects


def test_closed_files(client, root):
    f = client.open(f"{root}/f", "wb")
    f.write(b"abc")
    f.close()
    f.close()
    f.__exit__(None, None, None)
    with pytest.raises(ValueError):
        f.write(b"x")
    raw = client.open(f"{root}/f", "rb", buffering=0)
    nf = raw.native
    with raw:
        assert raw.read() == b"abc"
    raw.__exit__(None, None, None)
    for call in (raw.read, raw.readall, raw.tell, raw.size, raw.fsync, lambda: raw.seek(0),
                 lambda: raw.readinto(bytearray(1))):
        with pytest.raises(ValueError):
            call()
    nf.close()
    assert nf.closed
    for call in (lambda: nf.pread(bytearray(1), 0), lambda: nf.pwrite(b"x", 0), nf.size, nf.flush,
                 lambda: nf.truncate(0), lambda: nf.readable):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.EBADF
    assert client.read_file(f"{root}/f") == b"abc"


def test_file_outlives_its_client(cluster, root, client):
    import gc

    import weft

    client.write_file(f"{root}/f", b"kept")
    c2 = weft.connect(config=str(cluster / "client.toml"))
    f = c2.open(f"{root}/f", "rb")
    w = c2.open(f"{root}/w", "wb")
    del c2
    gc.collect()
    assert f.read() == b"kept"
    w.write(b"written")
    w.close()
    f.close()
    assert client.read_file(f"{root}/w") == b"written"


_PICKLE = r"""
import copy, pickle, sys
import weft
c = weft.connect()
c.write_file("/hostile-pickle", b"p")
f = c.open("/hostile-pickle", "rb")
n = c.inode("/hostile-pickle")
bad = []
for obj in (f, f.raw, f.raw.native, c.native):
    # Protocols 0 and 1 (copyreg) and __reduce__ called pybind11_object(x): abort.
    for how in [lambda o, p=p: pickle.dumps(o, protocol=p) for p in range(pickle.HIGHEST_PROTOCOL + 1)] + [
            copy.copy, lambda o: o.__reduce__(), lambda o: o.__reduce_ex__(0)]:
        try:
            how(obj)
            bad.append(repr(obj))
        except TypeError:
            pass
for p in range(pickle.HIGHEST_PROTOCOL + 1):
    m = pickle.loads(pickle.dumps(n, protocol=p))
    if (m.ino, m.size, m.layout) != (n.ino, n.size, n.layout):
        bad.append(p)
f.close()
print("OK" if not bad else bad)
sys.exit(1 if bad else 0)
"""


def test_pickling(client, root):
    import weft

    client.write_file(f"{root}/f", b"p")
    r = _run_script(_PICKLE)
    _ok(r)
    # A Client pickles as its arguments (it reconnects).
    c2 = pickle.loads(pickle.dumps(client))
    assert c2.read_file(f"{root}/f") == b"p"
    n = client.inode(f"{root}/f")
    for copy_of in (pickle.loads(pickle.dumps(n)), __import__("copy").copy(n), __import__("copy").deepcopy(n)):
        assert (copy_of.ino, copy_of.size, copy_of.layout, copy_of.mode) == (n.ino, n.size, n.layout, n.mode)
        buf = bytearray(1)
        assert client.read_batch_into([(n.ino, 0, buf, copy_of, None)]) == [1] and buf == b"p"
    state = n.__reduce__()[1][0]
    with pytest.raises(ValueError):
        weft._native._inode_from_state(state[:5])
    with pytest.raises(ValueError):
        weft._native._inode_from_state((state[0], 99) + state[2:])


_UNCONSTRUCTED = r"""
import os, sys
import weft
from weft import _native as n
c = weft.connect()
c.makedirs("/hostile-new", exist_ok=True)
c.write_file("/hostile-new/f", b"abcd")
ino = c.inode("/hostile-new/f")
failures = []
for cls in (n.File, n.Inode, n.Client):
    try:
        obj = cls.__new__(cls)
    except TypeError:
        continue
    # Before the fix: an object over uninitialized memory.
    failures.append(cls.__name__)
    try:
        if cls is n.Inode:
            c.read_batch_into([(ino.ino, 0, bytearray(4), obj, None)])
            repr(obj)
        elif cls is n.File:
            obj.pread(bytearray(4), 0)
            obj.close()
        else:
            obj.stat(b"/")
    except Exception:
        pass
for cls in (n.File, n.Inode, n.Client):
    try:
        cls()
        failures.append(cls.__name__ + "()")
    except TypeError:
        pass
print("FAIL" if failures else "OK", failures)
sys.exit(1 if failures else 0)
"""


def test_unconstructed_native_objects_refused(cluster):
    # File/Inode/Client.__new__ made an object whose C++ value was
    # uninitialized memory: its methods read garbage (std::bad_alloc, or a crash).
    r = _run_script(_UNCONSTRUCTED)
    _ok(r)


def test_native_client_arguments(cluster):
    import weft

    conf = str(cluster / "client.toml")
    for kwargs in (dict(io_threads=-1), dict(name=None), dict(statahead_ttl="1"), dict(early_read_bytes=2**64),
                   dict(write_buffer_bytes=2**64)):
        with pytest.raises(TypeError):
            weft.connect(config=conf, **kwargs)
    for kwargs in (dict(statahead_ttl=float("nan")), dict(call_timeout=-1), dict(retry_time=float("inf")),
                   dict(early_read_bytes=-2), dict(io_threads=257)):
        with pytest.raises(ValueError):
            weft.connect(config=conf, **kwargs)
    with pytest.raises(OSError):
        weft.connect(config="/nonexistent/client.toml")
    with pytest.raises(OSError):
        weft.connect(addr="not-an-address", config=conf)
    assert weft.connect(config=conf, io_threads=3).exists("/")


def test_huge_io_threads_is_an_error_not_an_abort(cluster):
    # libweft started every thread asked for: 100000 aborted the process
    # (std::terminate when the system refused one), 2**40 never returned.
    r = _run_script(r"""
import weft
for n in (100000, 2**40):
    try:
        weft.connect(io_threads=n)
    except ValueError as e:
        print("refused", n, e)
    else:
        raise SystemExit("connected with io_threads=%d" % n)
""", timeout=30)
    _ok(r)


# ---------------------------------------------------------------------------
# Threads, the GIL, fork


def test_threads_share_a_file_and_a_client(client, root):
    data = os.urandom(4 << 20)
    client.write_file(f"{root}/big", data)
    nf = client.native.open(os.fsencode(f"{root}/big"), os.O_RDONLY, 0)
    errors = []

    def reader(k):
        try:
            for i in range(10):
                off = (k * 7919 + i * 104729) % (len(data) - 65536)
                b = bytearray(65536)
                assert nf.pread(b, off) == 65536 and b == data[off:off + 65536]
                assert client.stat(f"{root}/big").st_size == len(data)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    nf.close()

    # Writers of disjoint ranges of one file.
    wf = client.native.open(os.fsencode(f"{root}/w"), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def writer(k):
        for i in range(8):
            wf.pwrite(bytes([k]) * 4096, (i * 6 + k) * 4096)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wf.close()
    assert client.read_file(f"{root}/w") == b"".join(bytes([k]) * 4096 for i in range(8) for k in range(6))

    # close() while other threads read: their reads succeed or fail with EBADF.
    for _ in range(3):
        f = client.native.open(os.fsencode(f"{root}/big"), os.O_RDONLY, 0)
        seen = []

        def rd():
            for i in range(20):
                try:
                    b = bytearray(256 << 10)
                    n = f.pread(b, i << 18)
                    seen.append("ok" if b[:n] == data[i << 18:(i << 18) + n] else "BAD DATA")
                except OSError as e:
                    seen.append(e.errno)

        threads = [threading.Thread(target=rd) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.005)
        f.close()
        for t in threads:
            t.join()
        assert set(seen) <= {"ok", errno.EBADF}, set(seen)

    # A buffered file shared by threads: every byte read once.
    with client.open(f"{root}/big", "rb") as bf:
        got = []

        def brd():
            while True:
                chunk = bf.read(100000)
                if not chunk:
                    return
                got.append(len(chunk))

        threads = [threading.Thread(target=brd) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(got) == len(data)


def test_long_calls_release_the_gil(client, root):
    client.write_file(f"{root}/big", b"\1" * (32 << 20))
    nf = client.native.open(os.fsencode(f"{root}/big"), os.O_RDONLY, 0)
    ticks, stop = [0], [False]

    def tick():
        while not stop[0]:
            ticks[0] += 1
            time.sleep(0.0005)

    t = threading.Thread(target=tick)
    t.start()
    try:
        before = ticks[0]
        t0 = time.monotonic()
        data = nf.pread_bytes(32 << 20, 0)
        took = time.monotonic() - t0
        during = ticks[0] - before
    finally:
        stop[0] = True
        t.join()
        nf.close()
    assert len(data) == 32 << 20
    if took > 0.05:  # the other thread ran while the read waited
        assert during > 5, (took, during)


def test_directory_changing_while_listed(client, root):
    client.makedirs(f"{root}/d")
    for i in range(30):
        client.write_file(f"{root}/d/f{i}", b"x")
    stop = [False]

    def churn():
        i = 0
        while not stop[0]:
            client.write_file(f"{root}/d/n{i}", b"y")
            try:
                client.remove(f"{root}/d/f{i % 30}")
            except FileNotFoundError:
                pass
            i += 1

    t = threading.Thread(target=churn)
    t.start()
    try:
        for _ in range(10):
            for e in client.scandir(f"{root}/d"):
                try:
                    assert e.stat().st_size in (0, 1)  # 0: a file of churn() being written
                except FileNotFoundError:
                    pass
            names = client.listdir(f"{root}/d")
            assert len(names) == len(set(names))
    finally:
        stop[0] = True
        t.join()


_FORK = r"""
import os, sys, threading, time
import weft
c = weft.connect()
c.makedirs("/hostile-fork", exist_ok=True)
c.write_file("/hostile-fork/f", b"hello")
f = c.open("/hostile-fork/f", "rb")
nf = c.native.open(b"/hostile-fork/f", os.O_RDONLY, 0)
busy = threading.Thread(target=lambda: [c.stat("/hostile-fork/f") for _ in range(300)])
busy.start()
pid = os.fork()
if pid == 0:
    code = 0
    try:
        assert c.read_file("/hostile-fork/f") == b"hello"
        c.write_file("/hostile-fork/child", b"child")
        for call in (f.read, lambda: nf.pread(bytearray(1), 0)):
            try:
                call()
                code |= 2
            except OSError as e:
                if e.errno != 9:
                    code |= 4
        f.close(); nf.close(); nf.close()
    except BaseException as e:
        print("child:", repr(e), flush=True)
        code |= 8
    os._exit(code)
busy.join()
deadline = time.monotonic() + 30
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        sys.exit("child hung")
    time.sleep(0.05)
assert os.waitstatus_to_exitcode(status) == 0, status
assert f.read() == b"hello"
assert nf.pread_bytes(5, 0) == b"hello"
assert c.read_file("/hostile-fork/child") == b"child"
print("OK")
"""


def test_fork_after_connect(cluster):
    # Under ASan (the module built with it, the runtime preloaded) the child
    # can hang in the sanitizer's own allocator lock, held by another thread
    # at the fork: glibc's malloc and jemalloc take theirs around fork(),
    # ASan's (gcc 12) does not. Not Weft's to fix.
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("fork() under ASan can deadlock in the sanitizer's allocator")
    r = _run_script(_FORK)
    _ok(r)
    assert r.stdout.strip().endswith("OK")


# ---------------------------------------------------------------------------
# weft.torch


def test_torch_datasets_bad_arguments(client, root):
    wt = pytest.importorskip("weft.torch")
    client.makedirs(f"{root}/empty")
    ds = wt.FileDataset(f"{root}/empty", client=client)
    assert len(ds) == 0 and list(wt.DataLoader(ds, batch_size=4)) == []
    with pytest.raises(IndexError):
        ds[0]
    with pytest.raises(FileNotFoundError):
        wt.FileDataset(f"{root}/none", client=client)
    with pytest.raises(TypeError):
        wt.FileDataset(None, client=client)
    with pytest.raises(ValueError):
        wt.FileDataset(f"{root}/empty", client=client, output="nope")

    client.write_file(f"{root}/shard", bytes(range(100)))
    assert len(wt.ShardDataset([], client=client)) == 0
    # A negative length read the next record's bytes (no error), a negative
    # offset failed only at the first read, a float offset was cut to an int.
    for rec in ((f"{root}/shard", -5, 10), (f"{root}/shard", 5, -3)):
        with pytest.raises(ValueError):
            wt.ShardDataset([rec, (f"{root}/shard", 0, 10)], client=client)
    with pytest.raises(TypeError):
        wt.ShardDataset([(f"{root}/shard", 0.5, 1)], client=client)
    with pytest.raises(ValueError):
        wt.ShardDataset([(f"{root}/shard", 95, 10)], client=client)
    with pytest.raises(FileNotFoundError):
        wt.ShardDataset([(f"{root}/nope", 0, 1)], client=client)
    sd = wt.ShardDataset([(f"{root}/shard", 3, 4), (f"{root}/shard", 0, 2)], client=client, output="bytes")
    assert sd.__getitems__([0, 1]) == [b"\3\4\5\6", b"\0\1"]
    with pytest.raises(TypeError):
        sd.__getitems__([0.5])
    with pytest.raises(IndexError):
        sd.__getitems__([0, 2])
    with pytest.raises(TypeError):
        sd["a"]


def test_torch_checkpoint_bad_arguments_and_corruption(client, root):
    wt = pytest.importorskip("weft.torch")
    import torch

    state = {"w": torch.arange(10, dtype=torch.float32), "b": torch.ones(3, 3, dtype=torch.int64)}
    wt.save(state, f"{root}/ck", client=client)
    with pytest.raises(TypeError):
        wt.load(f"{root}/ck", client=client, map_location=5)
    with pytest.raises(ZeroDivisionError):
        wt.load(f"{root}/ck", client=client, map_location=lambda s, loc: 1 / 0)
    with pytest.raises(ValueError):
        wt.load("/", client=client)
    with pytest.raises(TypeError):
        wt.load(None, client=client)
    with pytest.raises(FileNotFoundError):
        wt.load(f"{root}/none", client=client)
    with pytest.raises(ValueError):
        wt.save(state, "/", client=client)
    client.write_file(f"{root}/file", b"x")
    with pytest.raises(FileExistsError):
        wt.save(state, f"{root}/file", client=client)
    assert client.read_file(f"{root}/file") == b"x"

    manifest = pickle.loads(client.read_file(f"{root}/ck/manifest.pkl"))
    recs = manifest["tensors"]

    def with_record(**kw):
        r = [dict(x) for x in recs]
        r[0].update(kw)
        return r

    cases = {
        "no_tensors": dict(tensors=None),
        "record_int": dict(tensors=[5]),
        "neg_nbytes": dict(tensors=with_record(nbytes=-1)),
        "neg_offset": dict(tensors=with_record(offset=-4096)),
        "huge_offset": dict(tensors=with_record(offset=2**64)),
        "huge_nbytes": dict(tensors=with_record(nbytes=2**50)),
        "past_end": dict(tensors=with_record(offset=10**9)),
        "bad_shape": dict(tensors=with_record(shape=(7,))),
        "odd_nbytes": dict(tensors=with_record(nbytes=39)),
        "bad_dtype": dict(tensors=with_record(dtype="torch.save")),
        "bad_perm": dict(tensors=with_record(perm=[5, 9]), version=2),
        "bad_byteorder": dict(byteorder="middle"),
        "bad_data": dict(data="../ck/data.bin"),
        "no_object": dict(object=None),
    }
    for name, change in cases.items():
        path = f"{root}/{name}"
        wt.save(state, path, client=client)
        m = dict(manifest, data_ino=client.inode(f"{path}/data.bin").ino, **change)
        client.write_file(f"{path}/manifest.pkl", pickle.dumps(m))
        with pytest.raises(ValueError, match="corrupt checkpoint"):
            wt.load(path, client=client)
    # Not a pickle at all, or data cut short: clear errors too.
    wt.save(state, f"{root}/garbage", client=client)
    client.write_file(f"{root}/garbage/manifest.pkl", b"\x80\x05garbage")
    with pytest.raises(pickle.UnpicklingError):
        wt.load(f"{root}/garbage", client=client)
    wt.save(state, f"{root}/cut", client=client)
    with client.open(f"{root}/cut/data.bin", "r+b") as f:
        f.truncate(10)
    with pytest.raises((OSError, ValueError)):
        wt.load(f"{root}/cut", client=client)
    wt.save(state, f"{root}/nodata", client=client)
    client.remove(f"{root}/nodata/data.bin")
    with pytest.raises(FileNotFoundError):
        wt.load(f"{root}/nodata", client=client)
    # The intact checkpoint loads, equal.
    loaded = wt.load(f"{root}/ck", client=client)
    assert torch.equal(loaded["w"], state["w"]) and torch.equal(loaded["b"], state["b"])
