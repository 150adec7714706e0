"""libweft errors surface as the built-in OSError subclasses, with the path."""

import errno

import pytest


def check(exc_type, path, fn, *args, **kwargs):
    with pytest.raises(exc_type) as e:
        fn(*args, **kwargs)
    assert path in str(e.value), str(e.value)
    assert e.value.filename == path
    return e.value


def test_error_mapping(client, root):
    client.makedirs(f"{root}/d")
    client.write_file(f"{root}/f", b"x")
    client.write_file(f"{root}/d/inner", b"y")

    check(FileNotFoundError, f"{root}/nope", client.open, f"{root}/nope", "rb")
    check(FileNotFoundError, f"{root}/nope", client.stat, f"{root}/nope")
    check(FileNotFoundError, f"{root}/nope/x", client.open, f"{root}/nope/x", "wb")
    check(FileNotFoundError, f"{root}/nope", client.remove, f"{root}/nope")
    check(FileNotFoundError, f"{root}/nope", client.listdir, f"{root}/nope")
    check(IsADirectoryError, f"{root}/d", client.open, f"{root}/d", "rb")
    check(IsADirectoryError, f"{root}/d", client.open, f"{root}/d", "wb")
    check(IsADirectoryError, f"{root}/d", client.remove, f"{root}/d")
    check(NotADirectoryError, f"{root}/f", client.listdir, f"{root}/f")
    check(NotADirectoryError, f"{root}/f", client.rmdir, f"{root}/f")
    check(NotADirectoryError, f"{root}/f/x", client.open, f"{root}/f/x", "rb")
    check(FileExistsError, f"{root}/f", client.open, f"{root}/f", "xb")
    check(FileExistsError, f"{root}/d", client.mkdir, f"{root}/d")
    check(FileExistsError, f"{root}/f", client.makedirs, f"{root}/f", exist_ok=True)
    e = check(OSError, f"{root}/d", client.rmdir, f"{root}/d")
    assert e.errno == errno.ENOTEMPTY
    e = check(FileExistsError, f"{root}/f", client.rename, f"{root}/f", f"{root}/d/inner", noreplace=True)
    assert e.filename2 == f"{root}/d/inner"


def test_permission_error(client, root, as_nobody):
    client.makedirs(f"{root}/private")
    client.write_file(f"{root}/private/secret", b"s")
    # A client acting as uid 65534 cannot write a 0644 file of root.
    r = as_nobody(f"""
import sys
import weft
c = weft.connect(config=conf)
try:
    c.open({root + '/private/secret'!r}, 'wb')
except PermissionError as e:
    assert {root + '/private/secret'!r} in str(e), str(e)
    sys.exit(0)
sys.exit(5)
""")
    assert r.returncode == 0, r.stdout + r.stderr


_DOWN_SCRIPT = """
import os, sys, time
import weft
c = weft.connect(config=sys.argv[1], retry_time=1, call_timeout=1)
c.write_file("/f", b"x")
f = c.open("/unflushed", "wb")
f.write(b"x" * 100)  # in Python's buffer: flushed and closed at exit
nf = c.native.open("/native", os.O_CREAT | os.O_WRONLY, 0o644)
nf.pwrite(b"y" * 100, 0)  # in libweft's write-behind buffer
print("ready", flush=True)
sys.stdin.readline()
t0 = time.monotonic()
try:
    c.stat("/f/none")
except OSError as e:
    print("failed after", time.monotonic() - t0, e.errno, flush=True)
"""


def test_retry_time_bounds_calls_and_exit_with_the_cluster_down(tmp_path):
    # With libweft's defaults (10 s per attempt, 60 s of retries) a call
    # blocks about a minute when the cluster is down, and the exit of a
    # process with unclosed files about four: connect(retry_time=,
    # call_timeout=) bounds both.
    import os
    import shutil
    import subprocess
    import sys
    import time

    weft_bin = os.environ.get("WEFT_BIN") or shutil.which("weft")
    data = tmp_path / "down"
    r = subprocess.run([weft_bin, "up", "--data-dir", str(data), "--storage-servers", "1", "--targets-per-server", "1",
                        "--replicas", "1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-c", _DOWN_SCRIPT, str(data / "client.toml")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "ready\n", proc.communicate(timeout=60)
        r = subprocess.run([weft_bin, "down", "--data-dir", str(data)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        t0 = time.monotonic()
        out, err = proc.communicate("go\n", timeout=90)
        took = time.monotonic() - t0
        assert proc.returncode == 0, err[-2000:]
        assert out.startswith("failed after"), out + err[-2000:]
        assert float(out.split()[2]) < 10, out
        assert took < 60, (took, err[-2000:])
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        subprocess.run([weft_bin, "down", "--data-dir", str(data)], capture_output=True, timeout=120)
