#!/usr/bin/env python3
"""Filebench's fileserver and webserver personalities, scaled down, as a small script.

Filebench is not packaged in Debian; this follows its workload files (filebench 1.5
workloads/fileserver.f and webserver.f) flow op by flow op, with fewer files and threads so that
a trace of it stays a few MB (docs/engine-traces.md says why this and not postmark, fs_mark or
dbench):

  fileserver  fileset of NFILES files, sizes gamma(shape 1.5) around MEAN, 80 % preallocated;
              each thread loops: createfile, writewholefile, fsync, closefile; openfile,
              appendfilerand (1 .. 2 x 16 KiB), fsync, closefile; openfile, readwholefile,
              closefile; deletefile; statfile.
  webserver   fileset of NFILES files of gamma(1.5) around 16 KiB, all preallocated, and one
              shared log file; each thread loops: 10 x (openfile, readwholefile, closefile),
              then appendfilerand (1 .. 2 x 16 KiB) to the log, fsync.

The fsyncs are where the durability points of the trace come from: Filebench's own files do
not fsync, and ext3's revised jbd in Möbius §V-B committed at its own pace; here each file
write and each log append is made durable, as a file or web server that acknowledges them.

  filebench-like.py setup fileserver|webserver DIR [--seed S]
  filebench-like.py run fileserver|webserver DIR [--threads T] [--iterations N] [--seed S]

`run` prints `operations N` (loop iterations completed, every thread) on its last line.
"""

import argparse
import os
import random
import threading

PERSONALITIES = {
    # files, mean size, share preallocated, dir width (filebench's meandirwidth)
    "fileserver": {"files": 2000, "mean": 32 << 10, "prealloc": 0.8, "width": 20},
    "webserver": {"files": 1000, "mean": 16 << 10, "prealloc": 1.0, "width": 20},
}
APPEND = 16 << 10
IOSIZE = 1 << 20


def size(rng, mean):
    """A file size drawn like filebench's cvar-gamma (shape 1.5) with the given mean."""
    return max(512, int(rng.gammavariate(1.5, mean / 1.5)))


def path(root, i, width):
    return os.path.join(root, "set", f"d{i // width:04d}", f"f{i:06d}")


def write_file(p, n, rng, durable):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        left = n
        while left > 0:
            chunk = min(left, IOSIZE)
            os.write(fd, rng.randbytes(chunk))
            left -= chunk
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def append(p, rng):
    fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, rng.randbytes(rng.randint(1, 2 * APPEND)))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_whole(p):
    try:
        fd = os.open(p, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        while os.read(fd, IOSIZE):
            pass
    finally:
        os.close(fd)


def setup(kind, root, seed):
    spec = PERSONALITIES[kind]
    rng = random.Random(seed)
    for i in range(spec["files"]):
        if rng.random() < spec["prealloc"]:
            write_file(path(root, i, spec["width"]), size(rng, spec["mean"]), rng, False)
    if kind == "webserver":
        write_file(os.path.join(root, "log"), size(rng, spec["mean"]), rng, False)
    os.sync()


def fileserver_loop(root, spec, rng, lock):
    """One iteration of fileserver.f's flow."""
    def pick():
        return path(root, rng.randrange(spec["files"]), spec["width"])

    p = pick()
    with lock(p):
        write_file(p, size(rng, spec["mean"]), rng, True)
    p = pick()
    with lock(p):
        if os.path.exists(p):
            append(p, rng)
    p = pick()
    with lock(p):
        read_whole(p)
    p = pick()
    with lock(p):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
    p = pick()
    with lock(p):
        try:
            os.stat(p)
        except FileNotFoundError:
            pass


def webserver_loop(root, spec, rng, lock):
    """One iteration of webserver.f's flow."""
    for _ in range(10):
        read_whole(path(root, rng.randrange(spec["files"]), spec["width"]))
    log = os.path.join(root, "log")
    with lock(log):
        append(log, rng)


class Locks:
    """One lock per file name, as filebench's fileset entries are busy while a thread uses one."""

    def __init__(self):
        self.guard = threading.Lock()
        self.locks = {}

    def __call__(self, p):
        with self.guard:
            return self.locks.setdefault(p, threading.Lock())


def run(kind, root, threads, iterations, seed):
    spec = PERSONALITIES[kind]
    loop = fileserver_loop if kind == "fileserver" else webserver_loop
    locks = Locks()
    done = [0] * threads

    def worker(t):
        rng = random.Random(seed * 1000 + t)
        for _ in range(iterations):
            loop(root, spec, rng, locks)
            done[t] += 1

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(f"operations {sum(done)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["setup", "run"])
    ap.add_argument("kind", choices=sorted(PERSONALITIES))
    ap.add_argument("dir")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.step == "setup":
        setup(a.kind, a.dir, a.seed)
    else:
        run(a.kind, a.dir, a.threads, a.iterations, a.seed)


if __name__ == "__main__":
    main()
