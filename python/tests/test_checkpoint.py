"""weft.torch.save/load: equality, atomic replace, a save killed halfway."""

import collections
import errno
import fractions
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import time

import pytest
import torch

import weft.torch as wt


def state_dict():
    g = torch.Generator().manual_seed(1)
    base = torch.randn(8, 10, generator=g)
    return {
        "f32": torch.randn(300, 257, generator=g),
        "f16": torch.randn(33, 7, generator=g).half(),
        "bf16": torch.randn(5, 1000, generator=g).to(torch.bfloat16),
        "i64": torch.arange(-50, 12345, dtype=torch.int64),
        "bool": torch.rand(17, generator=g) > 0.5,
        "scalar": torch.tensor(3.25),
        "empty": torch.empty(0, 4),
        "noncontig": base[:, ::3],
        "transposed": base.t(),
        "big": torch.randn(3 << 20, generator=g),  # 12 MiB: several pieces and chunks
        "u8": torch.randint(0, 255, (1000,), dtype=torch.uint8, generator=g),
        "nested": {"step": 12, "lr": [0.1, 0.01], "t": torch.ones(3, dtype=torch.int32)},
        "name": "model-x",
    }


def assert_same(a, b):
    assert type(a) == type(b) or isinstance(a, torch.Tensor)
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a, b)
    else:
        assert a == b


def test_save_load_equality(client, root):
    sd = state_dict()
    wt.save(sd, f"{root}/ckpt", client=client)
    assert sorted(client.listdir(root)) == ["ckpt"]  # no temporary left
    back = wt.load(f"{root}/ckpt", client=client)
    assert_same(sd, back)
    assert back["noncontig"].is_contiguous()


def test_a_manifest_is_never_loaded_with_another_checkpoints_data(client, root):
    # What a load racing a save that swapped its checkpoint in and back out
    # could read: one checkpoint's manifest, the other's data. Same shapes:
    # nothing else would fail.
    wt.save({"step": 1, "w": torch.zeros(256)}, f"{root}/a", client=client)
    wt.save({"step": 2, "w": torch.ones(256)}, f"{root}/b", client=client)
    client.rename(f"{root}/b/manifest.pkl", f"{root}/a/manifest.pkl")
    with pytest.raises(OSError) as e:
        got = wt.load(f"{root}/a", client=client)
        pytest.fail(f"loaded step {got['step']} with w = {got['w'][:4]}")
    assert e.value.errno == errno.EAGAIN


def test_shared_tensors_and_parameters(client, root):
    w = torch.nn.Parameter(torch.randn(4, 4))
    obj = {"a": w, "b": w, "list": [torch.zeros(2), 5]}
    wt.save(obj, f"{root}/c", client=client)
    back = wt.load(f"{root}/c", client=client)
    assert back["a"] is back["b"] and isinstance(back["a"], torch.nn.Parameter)
    assert torch.equal(back["a"], w) and back["list"][1] == 5


def test_replace_existing(client, root):
    wt.save({"v": torch.tensor([1])}, f"{root}/c", client=client)
    wt.save({"v": torch.tensor([2])}, f"{root}/c", client=client)
    assert wt.load(f"{root}/c", client=client)["v"].item() == 2
    assert client.listdir(root) == ["c"]
    with pytest.raises(FileNotFoundError):
        wt.load(f"{root}/missing", client=client)


def test_saving_over_a_symlink_replaces_the_link_not_what_it_names(client, root):
    # "latest" -> "step-1": the save publishes a new "latest"; step-1 stays whole.
    wt.save({"v": torch.tensor([1])}, f"{root}/step-1", client=client)
    client.symlink("step-1", f"{root}/latest")
    wt.save({"v": torch.tensor([2])}, f"{root}/latest", client=client)
    assert wt.load(f"{root}/step-1", client=client)["v"].item() == 1
    assert wt.load(f"{root}/latest", client=client)["v"].item() == 2
    assert sorted(client.listdir(root)) == ["latest", "step-1"]
    client.symlink("step-1", f"{root}/link")
    for through in ("link", "link/", "link//"):  # "link/" names the directory: still refused
        with pytest.raises(OSError) as e:
            client.rmtree(f"{root}/{through}")  # never through a link
        assert e.value.errno == errno.ELOOP, through
    assert wt.load(f"{root}/step-1", client=client)["v"].item() == 1


def test_load_never_mixes_two_checkpoints(client, root):
    # A save lands between load's read of the manifest and its look at the data.
    wt.save({"step": 1, "w": torch.full((1000,), 1.0)}, f"{root}/c", client=client)

    class Racing:
        def __init__(self, c):
            self.c, self.fired = c, False

        def __getattr__(self, name):
            return getattr(self.c, name)

        def inode(self, p, *args, **kwargs):
            if not p.endswith("/c") and not self.fired:
                self.fired = True
                wt.save({"step": 2, "w": torch.full((1000,), 2.0)}, f"{root}/c", client=self.c)
            return self.c.inode(p, *args, **kwargs)

    racing = Racing(client)
    back = wt.load(f"{root}/c", client=racing)
    assert racing.fired
    assert back["step"] == 2 and back["w"][0].item() == 2.0


def test_dot_names_are_refused_before_writing(client, root):
    for name in (".", ".."):
        with pytest.raises(ValueError):
            wt.save({"v": torch.zeros(1 << 20)}, f"{root}/{name}", client=client)
    assert client.listdir(root) == []  # nothing written, no temporary left


SAVER = r"""
import sys, torch, weft, weft.torch as wt
c = weft.connect(config=sys.argv[1])
sd = {f"t{i}": torch.full((256, 1024), float(i)) for i in range(40)}
print("start", flush=True)
wt.save(sd, sys.argv[2], client=c)
print("done", flush=True)
"""


@pytest.mark.parametrize("previous", [False, True])
def test_killed_save_leaves_previous(client, root, cluster, previous):
    path = f"{root}/ckpt"
    if previous:
        wt.save({"old": torch.arange(10)}, path, client=client)
    env = dict(os.environ, WEFT_TORCH_SAVE_TEST_DELAY="0.2")
    p = subprocess.Popen([sys.executable, "-c", SAVER, str(cluster / "client.toml"), path], env=env,
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "start"
    # Wait until the temporary directory has data in it, then kill.
    deadline = time.time() + 60
    while time.time() < deadline:
        tmps = [n for n in client.listdir(root) if n.startswith(".ckpt.tmp-")]
        if tmps and client.exists(f"{root}/{tmps[0]}/data.bin") and \
                client.stat(f"{root}/{tmps[0]}/data.bin").st_size > (4 << 20):
            break
        time.sleep(0.05)
    else:
        p.kill()
        pytest.fail("the save never started writing")
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stdout.close()
    assert p.returncode == -signal.SIGKILL
    visible = [n for n in client.listdir(root) if not n.startswith(".")]
    if previous:
        assert visible == ["ckpt"]
        assert torch.equal(wt.load(path, client=client)["old"], torch.arange(10))
    else:
        assert visible == []
        with pytest.raises(FileNotFoundError):
            wt.load(path, client=client)
    assert [n for n in client.listdir(root) if n.startswith(".ckpt.tmp-")], "the killed save left its directory"
    # A later save succeeds, replaces whatever is there and sweeps the dead saver's directory.
    wt.save({"new": torch.ones(2)}, path, client=client)
    assert torch.equal(wt.load(path, client=client)["new"], torch.ones(2))
    assert [n for n in client.listdir(root) if n.startswith(".")] == []


def test_sweep_keeps_live_savers(client, root):
    """Only temporary directories of dead processes (or a day old) are swept."""
    host = wt._HOST                                      # host name and pid namespace
    live = f".ck.tmp-{host}-{os.getpid()}-aaaa"         # this process: alive
    dead = f".ck.tmp-{host}-{2**22 + 1}-cccc"           # no such pid here: swept
    other_host = f".ck.tmp-elsewhere-1-bbbb"             # another host, fresh: kept
    # Same host name, another pid namespace (a container): its pids are not ours.
    other_ns = f".ck.tmp-{host.rsplit('_', 1)[0]}_1-{2**22 + 1}-dddd"
    for d in (live, dead, other_host, other_ns):
        client.mkdir(f"{root}/{d}")
    # A killed publish of a "latest" symlink leaves the swapped-out link: swept too.
    client.symlink("elsewhere", f"{root}/.ck.tmp-{host}-{2**22 + 1}-eeee")
    wt.save({"x": torch.zeros(1)}, f"{root}/ck", client=client)
    left = sorted(n for n in client.listdir(root) if n.startswith("."))
    assert left == sorted([live, other_host, other_ns])


def test_non_utf8_sibling_and_path_types(client, root):
    # A name that is not UTF-8 next to the checkpoint made listing its parent
    # (the sweep of killed saves) fail, and so every save there.
    client.write_file(os.fsencode(root) + b"/\xff", b"x")
    wt.save({"w": torch.arange(5)}, f"{root}/ck", client=client)
    ck = pathlib.PurePosixPath(root) / "ck"
    wt.save({"w": torch.arange(6)}, os.fsencode(f"{root}/ck"), client=client)  # replaces
    assert torch.equal(wt.load(ck, client=client)["w"], torch.arange(6))
    ff = os.fsdecode(b"\xff")
    assert sorted(client.listdir(root)) == sorted(["ck", ff])
    ds = wt.FileDataset(pathlib.PurePosixPath(root), client=client, output="bytes")
    assert ds.paths[-1] == f"{root}/{ff}" and ds[len(ds) - 1] == b"x"
    shards = wt.ShardDataset([(pathlib.PurePosixPath(root) / ff, 0, 1)], client=client, output="bytes")
    assert shards[0] == b"x"


def test_conj_neg_memory_format_and_map_location(client, root):
    z = torch.randn(6, dtype=torch.cfloat, generator=torch.Generator().manual_seed(3))
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    cl3 = torch.randn(2, 3, 2, 4, 5).to(memory_format=torch.channels_last_3d)
    obj = {"conj": z.conj(), "neg": z.conj().imag, "cl": cl, "cl3": cl3, "t": torch.arange(12.).reshape(3, 4).t(),
           "expanded": torch.ones(3, 1).expand(3, 4)}
    wt.save(obj, f"{root}/ck", client=client)  # a conjugate (or negative) view used to raise
    back = wt.load(f"{root}/ck", client=client)
    for k, v in obj.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v), k
    assert not back["conj"].is_conj() and not back["neg"].is_neg()
    # The memory order of permuted dense tensors is kept, as torch.load does.
    assert back["cl"].is_contiguous(memory_format=torch.channels_last) and not back["cl"].is_contiguous()
    assert back["cl3"].is_contiguous(memory_format=torch.channels_last_3d)
    assert back["t"].stride() == obj["t"].stride()
    assert back["expanded"].is_contiguous()

    # map_location in every form torch.load takes.
    for loc in ("cpu", torch.device("cpu"), {"cpu": "cpu"}, {"cuda:0": "cpu"}):
        got = wt.load(f"{root}/ck", client=client, map_location=loc)
        assert torch.equal(got["cl"], cl) and got["cl"].device.type == "cpu", loc
    seen = []

    def keep(storage, location):
        seen.append(location)
        return storage

    got = wt.load(f"{root}/ck", client=client, map_location=keep)
    assert torch.equal(got["conj"], z.conj()) and seen == ["cpu"] * len(obj)
    got = wt.load(f"{root}/ck", client=client, map_location=lambda storage, location: None)
    assert torch.equal(got["t"], obj["t"])
    got = wt.load(f"{root}/ck", client=client, map_location=lambda storage, location: storage.cpu())
    assert torch.equal(got["cl"], cl) and got["cl"].is_contiguous(memory_format=torch.channels_last)
    with pytest.raises(TypeError):
        wt.load(f"{root}/ck", client=client, map_location=3)


def test_replace_succeeds_when_removing_the_old_one_fails(client, root, monkeypatch, caplog):
    # Once the exchange has published the new checkpoint, the save is done: a
    # failure removing the old one (now under the hidden name) used to make
    # save raise (and its error path then removed what it could).
    wt.save({"v": torch.full((100,), 1.0)}, f"{root}/ck", client=client)

    def broken(path):
        raise OSError(errno.EIO, "Input/output error (injected)", path)

    monkeypatch.setattr(client, "rmtree", broken)
    monkeypatch.setattr(client, "remove", broken)
    with caplog.at_level("WARNING", logger="weft.torch"):
        wt.save({"v": torch.full((100,), 2.0)}, f"{root}/ck", client=client)
    assert "injected" in caplog.text
    monkeypatch.undo()
    assert torch.equal(wt.load(f"{root}/ck", client=client)["v"], torch.full((100,), 2.0))
    left = [n for n in client.listdir(root) if n.startswith(".ck.tmp-")]
    assert len(left) == 1  # the old checkpoint, for a later sweep
    assert torch.equal(wt.load(f"{root}/{left[0]}", client=client)["v"], torch.full((100,), 1.0))


@pytest.mark.parametrize("failing_read", [1, 2])
def test_an_io_error_checking_the_old_checkpoint_is_raised_as_such(client, root, monkeypatch, failing_read):
    # Whether save may replace what is at the path is read from its manifest,
    # before the exchange (read 1) and after it (read 2). An I/O error there
    # says nothing about what is there: it used to read as "not a checkpoint"
    # (FileExistsError, and after the exchange the new checkpoint undone).
    # Now the error itself is raised, and the old checkpoint stays.
    wt.save({"v": torch.full((100,), 1.0)}, f"{root}/ck", client=client)
    original, reads = wt._read_manifest, [0]

    def flaky(c, path):
        reads[0] += 1
        if reads[0] == failing_read:
            raise TimeoutError(errno.ETIMEDOUT, "timed out (injected)", path)
        return original(c, path)

    monkeypatch.setattr(wt, "_read_manifest", flaky)
    with pytest.raises(TimeoutError):
        wt.save({"v": torch.full((100,), 2.0)}, f"{root}/ck", client=client)
    monkeypatch.undo()
    assert torch.equal(wt.load(f"{root}/ck", client=client)["v"], torch.full((100,), 1.0))
    assert not [n for n in client.listdir(root) if n.startswith(".ck.tmp-")]
    wt.save({"v": torch.full((100,), 3.0)}, f"{root}/ck", client=client)  # and the next save replaces it
    assert torch.equal(wt.load(f"{root}/ck", client=client)["v"], torch.full((100,), 3.0))


_ATEXIT_SCRIPT = """
import atexit, sys
def final():
    import torch
    import weft, weft.torch as wt
    c = weft.connect()
    w = torch.arange(10 << 20)  # several pieces and batches: the pools of save and load
    wt.save({"w": w}, sys.argv[1], client=c, threads=4)
    assert torch.equal(wt.load(sys.argv[1], client=c, threads=4)["w"], w)
    print("saved", flush=True)
atexit.register(final)
import weft  # its atexit hook runs before final, registered earlier
"""


def test_save_and_load_in_an_atexit_hook(client, cluster, root):
    # At exit no thread pool takes work (concurrent.futures refuses it, and
    # the extension parks every thread but the exiting one): save and load
    # then work in the calling thread.
    env = dict(os.environ, WEFT_CONFIG=str(cluster / "client.toml"))
    r = subprocess.run([sys.executable, "-c", _ATEXIT_SCRIPT, f"{root}/ck"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0 and r.stdout == "saved\n", r.stdout + r.stderr[-2000:]


def test_save_replaces_only_a_checkpoint_or_an_empty_directory(client, root):
    # A typo (the dataset's path for the checkpoint's) used to swap the
    # dataset out and remove it.
    client.makedirs(f"{root}/train")
    for i in range(3):
        client.write_file(f"{root}/train/sample{i}", b"x" * 100)
    client.write_file(f"{root}/file", b"keep")
    client.symlink("train", f"{root}/to-train")
    client.symlink("nothing-here", f"{root}/dangling")
    for target in ("train", "file", "to-train", "dangling"):
        with pytest.raises(FileExistsError):
            wt.save({"w": torch.zeros(2)}, f"{root}/{target}", client=client)
    assert sorted(client.listdir(f"{root}/train")) == ["sample0", "sample1", "sample2"]
    assert client.read_file(f"{root}/file") == b"keep"
    assert client.readlink(f"{root}/to-train") == "train" and client.readlink(f"{root}/dangling") == "nothing-here"
    assert sorted(client.listdir(root)) == ["dangling", "file", "to-train", "train"]  # no temporary left
    # An empty directory (made ahead for it) is replaced, as is a checkpoint.
    client.mkdir(f"{root}/ck")
    wt.save({"w": torch.ones(2)}, f"{root}/ck", client=client)
    wt.save({"w": torch.full((2,), 2.0)}, f"{root}/ck", client=client)
    assert torch.equal(wt.load(f"{root}/ck", client=client)["w"], torch.full((2,), 2.0))


def test_save_swaps_back_what_took_the_path_meanwhile(client, root):
    # Between save's look at `path` (a checkpoint) and its swap, a dataset
    # takes its place: the swap is undone, the dataset stays.
    wt.save({"w": torch.zeros(2)}, f"{root}/ck", client=client)

    class Racing:
        def __init__(self, c):
            self.c, self.fired = c, False

        def __getattr__(self, name):
            return getattr(self.c, name)

        def rename(self, src, dst, **kwargs):
            if kwargs.get("exchange") and not self.fired:
                self.fired = True
                client.rmtree(f"{root}/ck")
                client.makedirs(f"{root}/ck/data")
            return self.c.rename(src, dst, **kwargs)

    with pytest.raises(FileExistsError):
        wt.save({"w": torch.ones(2)}, f"{root}/ck", client=Racing(client))
    assert client.listdir(f"{root}/ck") == ["data"] and client.listdir(root) == ["ck"]


class _RunsCode:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_load_runs_no_code_named_by_a_checkpoint(client, root, tmp_path):
    marker = tmp_path / "ran"
    # In the object: refused unless weights_only=False.
    wt.save({"w": torch.zeros(2), "x": _RunsCode(marker)}, f"{root}/ck", client=client)
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        wt.load(f"{root}/ck", client=client)
    assert not marker.exists()
    # In the manifest: always refused (save writes no global there).
    client.mkdir(f"{root}/crafted")
    client.write_file(f"{root}/crafted/manifest.pkl", pickle.dumps(_RunsCode(marker)))
    for weights_only in (True, False):
        with pytest.raises(pickle.UnpicklingError):
            wt.load(f"{root}/crafted", client=client, weights_only=weights_only)
    assert not marker.exists()
    # A trusted checkpoint with any object: weights_only=False.
    wt.save({"f": fractions.Fraction(1, 3)}, f"{root}/any", client=client)
    with pytest.raises(pickle.UnpicklingError):
        wt.load(f"{root}/any", client=client)
    assert wt.load(f"{root}/any", client=client, weights_only=False)["f"] == fractions.Fraction(1, 3)


def test_model_and_optimizer_state_load_weights_only(client, root):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters(), betas=(0.8, 0.9))
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.StepLR(opt, 3)
    extra = {"size": torch.Size([2, 3]), "dtype": torch.bfloat16, "device": torch.device("cpu"),
             "layout": torch.strided, "fmt": torch.channels_last, "set": {1, 2}, "cplx": 1j, "sl": slice(1, 5),
             "counts": collections.Counter("abca"), "dd": collections.defaultdict(list, a=[1]), "b": b"x",
             "sparse": torch.eye(3).to_sparse()}
    obj = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "extra": extra}
    wt.save(obj, f"{root}/ck", client=client)
    back = wt.load(f"{root}/ck", client=client)
    assert type(back["model"]) is collections.OrderedDict and back["model"]._metadata == obj["model"]._metadata
    assert_same(dict(back["model"]), dict(obj["model"]))
    assert back["opt"]["param_groups"] == obj["opt"]["param_groups"]
    for k, st in obj["opt"]["state"].items():
        assert_same(back["opt"]["state"][k], st)
    assert back["sched"] == obj["sched"]
    sparse = back["extra"].pop("sparse")
    assert torch.equal(sparse.to_dense(), torch.eye(3))
    extra.pop("sparse")
    assert back["extra"] == extra and type(back["extra"]["dd"]) is collections.defaultdict


def test_a_sparse_tensor_whose_indices_are_out_of_range_is_refused(client, root):
    # torch rebuilds sparse tensors unchecked and leaves the check to the
    # loader (torch.load does it): a crafted checkpoint read out of bounds.
    bad = torch._sparse_coo_tensor_unsafe(torch.tensor([[5]]), torch.tensor([1.0]), (3,))
    wt.save({"s": bad}, f"{root}/bad", client=client)
    with pytest.raises(RuntimeError):
        wt.load(f"{root}/bad", client=client)
    assert not torch._utils._sparse_tensors_to_validate  # nothing left for a later load to trip on
    wt.save({"s": torch.eye(3).to_sparse()}, f"{root}/good", client=client)
    assert torch.equal(wt.load(f"{root}/good", client=client)["s"].to_dense(), torch.eye(3))
    assert not torch._utils._sparse_tensors_to_validate


def test_checkpoints_of_earlier_saves_load(client, root):
    # Their manifest holds torch_version as a TorchVersion (a str subclass).
    wt.save({"w": torch.arange(3)}, f"{root}/ck", client=client)
    manifest = pickle.loads(client.read_file(f"{root}/ck/manifest.pkl"))
    manifest["torch_version"] = torch.__version__
    client.write_file(f"{root}/ck/manifest.pkl", pickle.dumps(manifest, protocol=pickle.HIGHEST_PROTOCOL))
    assert torch.equal(wt.load(f"{root}/ck", client=client)["w"], torch.arange(3))


def test_a_checkpoint_of_the_other_byte_order_loads_with_its_bytes_swapped(client, root):
    # As saved on a machine of the other byte order: every element's bytes
    # reversed in data.bin, and the manifest saying so.
    sd = {"f32": torch.randn(1000), "i64": torch.arange(-5, 5000, dtype=torch.int64),
          "f16": torch.randn(77).half(), "c64": torch.randn(40, dtype=torch.complex64),
          "u8": torch.arange(0, 200, dtype=torch.uint8), "bool": torch.rand(9) > 0.5}
    wt.save(sd, f"{root}/ck", client=client)
    manifest = pickle.loads(client.read_file(f"{root}/ck/manifest.pkl"))
    assert manifest["byteorder"] == sys.byteorder
    other = "big" if sys.byteorder == "little" else "little"
    with client.open(f"{root}/ck/data.bin", "r+b", buffering=0) as f:
        for r in manifest["tensors"]:
            if not r["nbytes"]:
                continue
            f.seek(r["offset"])
            raw = bytearray(f.read(r["nbytes"]))
            wt._swap_bytes(torch.frombuffer(raw, dtype=torch.uint8), wt._dtype_from_name(r["dtype"]))
            f.seek(r["offset"])
            assert f.write(raw) == len(raw)
    manifest["byteorder"] = other
    client.write_file(f"{root}/ck/manifest.pkl", pickle.dumps(manifest, protocol=pickle.HIGHEST_PROTOCOL))
    assert_same(sd, wt.load(f"{root}/ck", client=client))


def test_non_utf8_checkpoint_name(client, root):
    # Its data file was opened by a str path: a name with surrogate escapes raised TypeError.
    path = os.fsencode(root) + b"/ck\xff"
    wt.save({"w": torch.arange(3)}, path, client=client)
    wt.save({"w": torch.arange(4)}, path, client=client)  # replaces
    assert torch.equal(wt.load(path, client=client)["w"], torch.arange(4))
    assert client.listdir(root) == [os.fsdecode(b"ck\xff")]


def test_names_near_the_length_limit(client, root):
    # The temporary name added ~100 bytes to the checkpoint's: a name near
    # the 255-byte limit failed.
    names = ["c" * 255, "\u00e9" * 127]
    for name in names:
        wt.save({"w": torch.arange(3)}, f"{root}/{name}", client=client)
        wt.save({"w": torch.arange(4)}, f"{root}/{name}", client=client)  # replaces
        assert torch.equal(wt.load(f"{root}/{name}", client=client)["w"], torch.arange(4))
    assert sorted(client.listdir(root)) == sorted(names)
