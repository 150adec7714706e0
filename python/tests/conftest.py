"""Fixtures: one local cluster (`weft up`) for the whole session, always
stopped (`weft down`) at the end, also when tests fail or the run is
interrupted. WEFT_BIN names the weft binary (set by ctest)."""

import os
import shutil
import signal
import subprocess
import sys
import uuid

import pytest

# Every `weft up` (and `weft mount`) a test runs, and what it starts, stops on
# its own when this process dies without reaching `weft down` (SIGKILL, a
# crash): they watch WEFT_OWNER_PID (docs/local-cluster.md). Set here, for the
# whole process, so that tests running `weft up` themselves get it too.
os.environ["WEFT_OWNER_PID"] = str(os.getpid())


def _weft_bin() -> str:
    b = os.environ.get("WEFT_BIN") or shutil.which("weft")
    if not b:
        pytest.exit("WEFT_BIN is not set and no weft binary is on PATH", returncode=2)
    return b


def _run(args, timeout=120):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    return r.returncode, r.stdout


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """The cluster's data directory; its client config is DIR/client.toml
    (also exported as WEFT_CONFIG for subprocesses and default clients)."""
    weft_bin = _weft_bin()
    data_dir = tmp_path_factory.mktemp("weft-cluster")
    # ctest (or a user) stopping the run with SIGTERM must still stop the cluster.
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, on_term)
    try:
        code, out = _run([weft_bin, "up", "--data-dir", str(data_dir), "--storage-servers", "2",
                          "--targets-per-server", "1", "--replicas", "2"], timeout=180)
        if code != 0:
            pytest.fail(f"weft up failed ({code}):\n{out}", pytrace=False)
        config = str(data_dir / "client.toml")
        os.environ["WEFT_CONFIG"] = config
        yield data_dir
    finally:
        code, out = _run([weft_bin, "down", "--data-dir", str(data_dir)], timeout=120)
        if code != 0:
            sys.stderr.write(f"weft down failed ({code}):\n{out}\n")
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def client(cluster):
    import weft

    c = weft.connect(config=str(cluster / "client.toml"))
    yield c


@pytest.fixture
def root(client, request):
    """A fresh directory for one test."""
    path = f"/t/{request.node.name.replace('[', '_').replace(']', '')}-{uuid.uuid4().hex[:6]}"
    client.makedirs(path)
    return path


@pytest.fixture
def as_nobody(cluster):
    """Runs a Python script as uid/gid 65534 with `conf` (a copy of the
    client config it can read) defined; returns the CompletedProcess.
    Skips unless the tests run as root."""
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user")
    conf_dir = tempfile.mkdtemp(prefix="weft-conf-")  # in /tmp: pytest's own temporaries are 0700
    os.chmod(conf_dir, 0o755)
    conf = os.path.join(conf_dir, "client.toml")
    shutil.copy(cluster / "client.toml", conf)
    os.chmod(conf, 0o644)

    def run(script: str):
        prologue = f"import os\nos.setgid(65534); os.setuid(65534)\nconf = {conf!r}\n"
        return subprocess.run([sys.executable, "-c", prologue + script], capture_output=True, text=True, timeout=60)

    yield run
    shutil.rmtree(conf_dir)
