"""Sweeps and crash soaks on Dask (docs/python.md).

A sweep is the product designs × presets × params × workloads × seeds; each cell is one task
(``bench`` or ``crashtest`` with those settings). Every finished cell is written at once as one
Parquet file under ``OUT/cells/`` (a Parquet dataset: read it with ``pandas.read_parquet(OUT /
"cells")``), so an interrupted sweep keeps what finished and a re-run skips it (resume). A cell
that fails records its error and its seed, and the sweep goes on.

Command line: ``mobius-sweep --spec sweep.toml [--scheduler tcp://HOST:PORT] --out DIR``
(``python -m mobius.dask_sweep`` is the same). Without a scheduler a ``LocalCluster`` with one
single-threaded worker per core runs the cells; ``--workers 0`` runs them in this process.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from . import _native

KINDS = ("bench", "crashtest")
#: ``bench`` keys that measure the machine (wall clock, memory) rather than the simulation: the
#: ones two runs of the same cell may differ in.
WALL_CLOCK_KEYS = ("wall_s", "build_wall_s", "run_wall_s", "sim_page_programs_per_s",
                   "run_page_programs_per_s", "peak_rss_bytes")
GRID_KEYS = {"kind", "designs", "presets", "params", "set", "workloads", "seeds", "options"}


def cells(grid: dict) -> list[dict]:
    """The cells of ``grid``, in a fixed order. Keys: ``kind`` (bench|crashtest), ``designs``
    (names, or ["all"]), ``presets``, ``params`` (list of dicts), ``set`` (device overrides),
    ``workloads`` (list of dicts of workload options), ``seeds`` (list, or a count n meaning
    1..n), ``options`` (other keyword arguments for every cell, e.g. ``crash_points``)."""
    unknown = set(grid) - GRID_KEYS
    if unknown:
        raise _native.ConfigError(f"unknown sweep key(s) {sorted(unknown)}; known: {sorted(GRID_KEYS)}")
    kind = grid.get("kind", "bench")
    if kind not in KINDS:
        raise _native.ConfigError(f"unknown sweep kind '{kind}'; known: {', '.join(KINDS)}")
    designs = grid.get("designs", ["mobius"])
    if designs == ["all"]:
        designs = [d["name"] for d in _native.designs()]
    seeds = grid.get("seeds", [1])
    if isinstance(seeds, int):
        seeds = list(range(1, seeds + 1))
    out = []
    for design, preset, params, workload, seed in itertools.product(
            designs, grid.get("presets", ["small"]), grid.get("params", [{}]),
            grid.get("workloads", [{}]), seeds):
        cell = {"kind": kind, "ftl": design, "preset": preset, "params": params,
                "set": grid.get("set", {}), "workload": workload, "seed": int(seed),
                "options": grid.get("options", {})}
        cell["cell_id"] = cell_id(cell)
        out.append(cell)
    return out


def cell_id(cell: dict) -> str:
    """A stable name for a cell: the hash of its settings."""
    text = json.dumps({k: v for k, v in cell.items() if k != "cell_id"}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_cell(cell: dict) -> dict:
    """Runs one cell; never raises: an error is recorded with the cell's seed."""
    from . import bench, crashtest
    fn = bench if cell["kind"] == "bench" else crashtest
    kw = dict(cell["options"])
    kw.update(cell["workload"])
    if cell["kind"] == "crashtest":
        kw.setdefault("jobs", 1)
    start = time.perf_counter()
    try:
        result = fn(cell["ftl"], cell["preset"], params=cell["params"] or None,
                    set=cell["set"] or None, seed=cell["seed"], **kw)
        error = None
    except Exception as e:  # noqa: BLE001 - the sweep goes on; the error is the cell's result
        result, error = None, f"{type(e).__name__}: {e}"
    return {**cell, "result": result, "error": error, "wall_s": time.perf_counter() - start}


def _row(done: dict) -> dict:
    return {"cell_id": done["cell_id"], "kind": done["kind"], "ftl": done["ftl"],
            "preset": done["preset"], "seed": done["seed"],
            "params": json.dumps(done["params"], sort_keys=True),
            "set": json.dumps(done["set"], sort_keys=True),
            "workload": json.dumps(done["workload"], sort_keys=True),
            "error": done["error"], "wall_s": done["wall_s"],
            "result": json.dumps(done["result"], sort_keys=True)}


def _write_part(cells_dir: Path, done: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pylist([_row(done)])
    tmp = cells_dir / f".{done['cell_id']}.parquet.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, cells_dir / f"{done['cell_id']}.parquet")


def load(out: str | Path):
    """The finished cells of a sweep directory as a DataFrame (see :func:`frame`)."""
    import pandas as pd
    parts = sorted((Path(out) / "cells").glob("*.parquet"))
    rows = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True) if parts else None
    return frame(rows.to_dict("records") if rows is not None else [])


def frame(rows: list[dict]):
    """Rows (as written to Parquet) as a DataFrame: the cell's settings, ``error``, ``wall_s``
    (the cell's), and every result key flattened (``latency_us.p99``...)."""
    import pandas as pd
    if not rows:
        return pd.DataFrame()
    raw = pd.DataFrame(rows)
    results = pd.json_normalize([json.loads(r) or {} for r in raw["result"]])
    results = results.drop(columns=[c for c in results.columns if c in raw.columns])
    out = pd.concat([raw.drop(columns=["result"]), results], axis=1)
    return out.sort_values(["kind", "ftl", "preset", "params", "workload", "seed"],
                           ignore_index=True)


def local_client(workers: int | None = None):
    """A LocalCluster sized to the machine: one single-threaded worker process per core."""
    from dask.distributed import Client, LocalCluster
    n = workers or os.cpu_count() or 1
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    return Client(cluster)


def run_sweep(grid: dict, client: Any = None, out: str | Path | None = None,
              progress: bool = False, serial: bool = False):
    """Runs every cell not yet finished in ``out`` on ``client`` (or serially with
    ``serial=True``, or on a fresh LocalCluster); returns :func:`load` of ``out`` (or a frame of
    this run's cells when ``out`` is None)."""
    todo = cells(grid)
    finished: list[dict] = []
    cells_dir = None
    if out is not None:
        cells_dir = Path(out) / "cells"
        cells_dir.mkdir(parents=True, exist_ok=True)
        have = {p.stem for p in cells_dir.glob("*.parquet")}
        todo = [c for c in todo if c["cell_id"] not in have]
    total = len(todo)

    def finish(done: dict, n: int) -> None:
        if cells_dir is not None:
            _write_part(cells_dir, done)
        finished.append(done)
        if progress:
            mark = f" FAILED (seed {done['seed']}): {done['error']}" if done["error"] else ""
            print(f"[{n}/{total}] {done['ftl']} {done['preset']} seed {done['seed']}{mark}",
                  file=sys.stderr, flush=True)

    if serial:
        for n, c in enumerate(todo, 1):
            finish(run_cell(c), n)
    else:
        from dask.distributed import as_completed
        own = client is None
        client = client or local_client()
        try:
            futures = client.map(run_cell, todo, key=[f"mobius-{c['cell_id']}" for c in todo],
                                 pure=False)
            for n, fut in enumerate(as_completed(futures), 1):
                finish(fut.result(), n)
        finally:
            if own:
                client.close()
    if out is not None:
        return load(out)
    return frame([_row(d) for d in finished])


def crashtest_on(client: Any, ftl: str, *, seed: int | None = None, seeds: int | None = None,
                 **kw: Any) -> dict:
    """A crash soak split across Dask workers, one (design, seed) campaign per task; the
    report has the same counts, failing seeds and failures as the one-process soak of the
    same seeds (``wall_s`` is this run's elapsed time)."""
    n = seeds or 1
    if seed is None:
        first = random.SystemRandom().randrange(1, 1 << 48)
        print(f"crashtest: fresh seeds {first}..{first + n - 1}", file=sys.stderr)
    else:
        first = seed
    names = [d["name"] for d in _native.designs()] if ftl == "all" else [ftl]
    tasks = [(name, first + k) for name in names for k in range(n)]
    start = time.perf_counter()
    futures = client.map(_one_cell, tasks, [kw] * len(tasks), pure=False)
    parts = client.gather(futures)
    return merge_soaks(parts, time.perf_counter() - start)


def campaign_on(client: Any, ftl: str, *, second_lives: int = 0, **kw: Any) -> dict:
    """One crash campaign whose crash points are checked on every worker of ``client``: each
    records the (deterministic) run and checks one share of the points; the merged report has the
    same counts, violations (in the same order) and recovery figures as the one-process campaign
    (``wall_s`` is this run's elapsed time). Second lives are not split: give ``second_lives=0``."""
    if second_lives:
        raise _native.ConfigError("a split campaign has no second lives; run them in one process")
    from . import WORKLOAD_OPTIONS, _split
    workload = _split({k: kw.pop(k) for k in list(kw) if k in WORKLOAD_OPTIONS})
    parts = max(1, len(client.scheduler_info().get("workers", {})))
    args = _campaign_args(ftl, kw, workload)
    start = time.perf_counter()
    futures = [client.submit(_share, args, (k, parts), pure=False) for k in range(parts)]
    shares = client.gather(futures)
    return _native.crashtest(*args[:-1], 0, args[-1], None, shares,
                             time.perf_counter() - start)


def _campaign_args(ftl: str, kw: dict, workload: dict) -> tuple:
    """Positional arguments of ``_native.crashtest`` up to ``full_data``, then the workload."""
    from . import _strs
    return (ftl, kw.get("preset", "small"), _strs(kw.get("params")), _strs(kw.get("set")),
            kw.get("seed"), None, None, kw.get("crash_points", 1000), kw.get("torn", False),
            kw.get("exhaustive", False), kw.get("promise"), kw.get("threads"), False,
            kw.get("full_data", False), workload)


def _share(args: tuple, share: tuple[int, int]) -> str:
    return _native.crashtest(*args[:-1], 0, args[-1], share)


def _one_cell(task: tuple[str, int], kw: dict) -> dict:
    from . import crashtest
    name, seed = task
    return crashtest(name, seed=seed, seeds=1, jobs=1, **kw)


def merge_soaks(parts: list[dict], wall_s: float) -> dict:
    """Merges one-cell soak reports, given in (design, seed) order, into one soak report."""
    merged = {"seeds": 0, "failing_seeds": [], "crash_points": 0, "violations": 0,
              "designs": {}, "failures": [], "wall_s": wall_s,
              # Every cell of one soak cuts its images the same way.
              "cut_model": parts[0].get("cut_model", "instant") if parts else "instant"}
    for p in parts:
        merged["seeds"] += p["seeds"]
        merged["crash_points"] += p["crash_points"]
        merged["violations"] += p["violations"]
        for s in p["failing_seeds"]:
            if s not in merged["failing_seeds"]:
                merged["failing_seeds"].append(s)
        merged["failures"].extend(p["failures"])
        for name, t in p["designs"].items():
            d = merged["designs"].setdefault(name, {"seeds": 0, "failing_seeds": [],
                                                    "crash_points": 0, "violations": 0})
            d["seeds"] += t["seeds"]
            d["crash_points"] += t["crash_points"]
            d["violations"] += t["violations"]
            d["failing_seeds"].extend(s for s in t["failing_seeds"] if s not in d["failing_seeds"])
    return merged


def load_spec(path: str | Path) -> dict:
    """A sweep spec from TOML: the keys of :func:`cells` at the top level (or under [sweep])."""
    import tomllib
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    return doc.get("sweep", doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="mobius-sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="sweep spec (TOML)")
    ap.add_argument("--out", required=True, help="output directory (cells/ Parquet dataset)")
    ap.add_argument("--scheduler", help="address of a Dask scheduler (tcp://HOST:PORT)")
    ap.add_argument("--workers", type=int, default=None,
                    help="LocalCluster workers (default: every core; 0 = run in this process)")
    a = ap.parse_args(argv)
    grid = load_spec(a.spec)
    if a.scheduler:
        from dask.distributed import Client
        client = Client(a.scheduler)
        frame = run_sweep(grid, client=client, out=a.out, progress=True)
    elif a.workers == 0:
        frame = run_sweep(grid, out=a.out, progress=True, serial=True)
    else:
        client = local_client(a.workers)
        try:
            frame = run_sweep(grid, client=client, out=a.out, progress=True)
        finally:
            # Close the client before its cluster, so shutdown does not report lost results.
            cluster = client.cluster
            client.close()
            cluster.close()
    failed = int(frame["error"].notna().sum()) if len(frame) else 0
    print(f"{len(frame)} cells in {a.out}/cells ({failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
