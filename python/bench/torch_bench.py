#!/usr/bin/python3
"""Benchmark of weft.torch against plain PyTorch file access.

1. One epoch over N files of --file-size bytes (default 20,000 x 128 KiB in
   100 directories), batch --batch-size, --workers DataLoader workers:
     - weft.torch.FileDataset + weft.torch.DataLoader (batched reads, prefetch);
     - a plain torch Dataset (open().read() per file) over the FUSE mount of
       the same files (--fuse MOUNT: the cluster's mount point), if given;
     - the same plain Dataset over a local directory (--local DIR).
2. Checkpoint save and load of a ~--ckpt-mib MiB state dict: weft.torch.save /
   weft.torch.load against torch.save (+ fsync) / torch.load on local disk.

Prints one table. Example (small scale, on a `weft up` cluster):
    PYTHONPATH=build/release/python /usr/bin/python3 python/bench/torch_bench.py \
        --config weft-data/client.toml --files 500 --dirs 10 --ckpt-mib 64
The local directory is read through the page cache (it was just written);
pass --drop-caches (root) to drop it before each read.
"""

import argparse
import concurrent.futures as futures
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.utils.data as data

import weft
import weft.torch as wt


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


class LocalFiles(data.Dataset):
    """The plain way: one open().read() per sample."""

    def __init__(self, root: str):
        self.paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with open(self.paths[i], "rb") as f:
            return f.read()


def nbytes_of(batch) -> int:
    return sum(len(x) for x in batch)


def collate(batch):
    return batch


def run_epoch(loader) -> tuple:
    t0 = time.perf_counter()
    files = total = 0
    for batch in loader:
        files += len(batch)
        total += nbytes_of(batch)
    return time.perf_counter() - t0, files, total


def drop_caches(enabled: bool):
    if enabled:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")


def setup_files(client, args, local_dir):
    payload = os.urandom(args.file_size)
    paths = [f"d{i % args.dirs:03d}/f{i:06d}.bin" for i in range(args.files)]
    for d in range(min(args.dirs, args.files)):
        client.makedirs(f"{args.weft_root}/files/d{d:03d}", exist_ok=True)
        os.makedirs(f"{local_dir}/d{d:03d}", exist_ok=True)

    def put(rel):
        client.write_file(f"{args.weft_root}/files/{rel}", payload)
        with open(f"{local_dir}/{rel}", "wb") as f:
            f.write(payload)

    with futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, paths))


def make_state_dict(total_bytes: int):
    tensor_bytes = 16 << 20
    n = max(1, total_bytes // tensor_bytes)
    return {f"layer{i}.weight": torch.randn(tensor_bytes // 4) for i in range(n)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="client config (default $WEFT_CONFIG, ./weft-data/client.toml)")
    ap.add_argument("--addr", help="mgmtd host:port overriding the config")
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--file-size", type=int, default=128 << 10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--weft-root", default="/bench-torch")
    ap.add_argument("--fuse", help="mount point of the same cluster (the files are read at MOUNT/<weft-root>/files)")
    ap.add_argument("--local", help="local directory for the local baseline (default: a temporary directory)")
    ap.add_argument("--ckpt-mib", type=int, default=1024)
    ap.add_argument("--skip-setup", action="store_true", help="files are already written")
    ap.add_argument("--skip-epoch", action="store_true")
    ap.add_argument("--skip-ckpt", action="store_true")
    ap.add_argument("--drop-caches", action="store_true")
    args = ap.parse_args()

    client = weft.connect(addr=args.addr, config=args.config)
    local_root = args.local or tempfile.mkdtemp(prefix="weft-bench-")
    local_dir = os.path.join(local_root, "files")
    rows = []
    try:
        if not args.skip_epoch:
            if not args.skip_setup:
                t0 = time.perf_counter()
                setup_files(client, args, local_dir)
                print(f"setup: {args.files} files of {human(args.file_size)} in {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr)
            ds = wt.FileDataset(f"{args.weft_root}/files", client=client)
            loader = wt.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                                   collate_fn=collate)
            rows.append(("epoch", "weft.torch FileDataset", *run_epoch(loader)))
            if args.fuse:
                fuse_dir = os.path.join(args.fuse, args.weft_root.lstrip("/"), "files")
                loader = data.DataLoader(LocalFiles(fuse_dir), batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, collate_fn=collate)
                rows.append(("epoch", "torch Dataset on FUSE", *run_epoch(loader)))
            drop_caches(args.drop_caches)
            loader = data.DataLoader(LocalFiles(local_dir), batch_size=args.batch_size, shuffle=True,
                                     num_workers=args.workers, collate_fn=collate)
            rows.append(("epoch", "torch Dataset on local disk", *run_epoch(loader)))

        if not args.skip_ckpt:
            sd = make_state_dict(args.ckpt_mib << 20)
            total = sum(t.numel() * t.element_size() for t in sd.values())
            path = f"{args.weft_root}/ckpt"
            t0 = time.perf_counter()
            wt.save(sd, path, client=client)
            rows.append(("save", "weft.torch.save", time.perf_counter() - t0, len(sd), total))
            t0 = time.perf_counter()
            back = wt.load(path, client=client)
            rows.append(("load", "weft.torch.load", time.perf_counter() - t0, len(back), total))
            del back
            local_ckpt = os.path.join(local_root, "ckpt.pt")
            t0 = time.perf_counter()
            with open(local_ckpt, "wb") as f:
                torch.save(sd, f)
                f.flush()
                os.fsync(f.fileno())
            rows.append(("save", "torch.save local (+fsync)", time.perf_counter() - t0, len(sd), total))
            drop_caches(args.drop_caches)
            t0 = time.perf_counter()
            back = torch.load(local_ckpt)
            rows.append(("load", "torch.load local", time.perf_counter() - t0, len(back), total))
            del back
    finally:
        if not args.local:
            shutil.rmtree(local_root, ignore_errors=True)

    print(f"{'what':6} {'how':30} {'seconds':>9} {'items':>8} {'bytes':>11} {'items/s':>10} {'MiB/s':>9}")
    for what, how, secs, items, nbytes in rows:
        print(f"{what:6} {how:30} {secs:9.2f} {items:8d} {human(nbytes):>11} {items / secs:10.1f} "
              f"{nbytes / secs / (1 << 20):9.1f}")


if __name__ == "__main__":
    main()
