"""Chunks nobody queued for meta's chunk GC are removed by the storage
servers' orphan sweep once meta no longer has their file. Here a killed
writer's (sent, never reported), with meta's queueing switched off by a fault
point (meta.gc.queue_skip): meta's session reaper queues a dead writer's
unlinked file for every chain now, and the GC would take them first. A
cluster of its own: its servers run with [storage] orphan_grace_s = 10 and a
quick session reaper."""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import _run, _weft_bin


def _used(weft_bin, config):
    code, out = _run([weft_bin, "status", "--json", "--config", config])
    assert code == 0, out
    return sum(t["used_bytes"] for t in json.loads(out)["targets"])


def test_killed_writers_chunks_go_once_the_file_is_gone(tmp_path):
    weft_bin = _weft_bin()
    d = tmp_path / "c"
    up = [weft_bin, "up", "--data-dir", str(d), "--storage-servers", "2", "--targets-per-server", "1",
          "--replicas", "1"]
    code, out = _run(up, timeout=180)
    assert code == 0, out
    try:
        # `weft up` keeps edited configs: restart the servers with the settings.
        for name in ("storage-1", "storage-2"):
            with open(d / "conf" / f"{name}.toml", "a") as f:
                f.write("\n[storage]\norphan_grace_s = 10\n")
        meta = (d / "conf" / "meta.toml").read_text()
        (d / "conf" / "meta.toml").write_text(
            meta.replace("[meta]\n", "[meta]\nsession_reap_min_age_s = 1\nsession_reap_interval_ms = 200\n", 1))
        for name in ("storage-1", "storage-2", "meta"):
            os.kill(int((d / "run" / f"{name}.pid").read_text()), 15)
        time.sleep(2)
        os.environ["WEFT_FAULTS"] = "meta.gc.queue_skip"  # the servers `up` starts inherit it
        try:
            code, out = _run(up, timeout=180)
        finally:
            del os.environ["WEFT_FAULTS"]
        assert code == 0, out
        config = str(d / "client.toml")
        writer = f"""
import os, sys, time, weft
c = weft.connect(config={config!r})
f = c.native.open("/crashed.bin", os.O_CREAT | os.O_WRONLY, 0o644)
f.pwrite(os.urandom(4 << 20), 0)  # four full chunks: sent at once, the length never reported
time.sleep(2)
os._exit(0)                       # killed: no close
"""
        r = subprocess.run([sys.executable, "-c", writer], env=dict(os.environ), timeout=120)
        assert r.returncode == 0
        code, out = _run([weft_bin, "stat", "/crashed.bin", "--config", config])
        assert code == 0 and "size: 0" in out, out
        deadline = time.time() + 30
        while _used(weft_bin, config) < (4 << 20) and time.time() < deadline:
            time.sleep(0.5)  # usage travels with heartbeats
        assert _used(weft_bin, config) >= 4 << 20
        code, out = _run([weft_bin, "rm", "/crashed.bin", "--config", config])
        assert code == 0, out
        deadline = time.time() + 90  # the reaper, then checks 2.5 s apart for 10 s
        while _used(weft_bin, config) > 0 and time.time() < deadline:
            time.sleep(0.5)
        assert _used(weft_bin, config) == 0
        logs = "".join((d / "logs" / f"storage-{i}.log").read_text() for i in (1, 2))
        assert "which meta no longer has" in logs
        # Each target remembers meta's store id and issued-id mark before it removes anything.
        for i in (1, 2):
            state = (d / "data" / f"storage-{i}" / "t0" / "orphan-sweep.state").read_text().split()
            assert len(state) == 2 and int(state[0], 16) != 0 and int(state[1]) > 0, state
    finally:
        _run([weft_bin, "down", "--data-dir", str(d)], timeout=120)
