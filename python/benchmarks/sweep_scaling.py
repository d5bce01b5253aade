"""Scaling benchmark (issue #18): the same sweep (16 bench cells) on a LocalCluster with one
worker and with one worker per core; prints the speedup (target ≥ 0.8 × cores) and checks the
two result sets are identical cell by cell (wall-clock columns aside).

    python3 python/benchmarks/sweep_scaling.py [--requests N] [--workers W]
"""

import argparse
import os
import time

from mobius import dask_sweep

VOLATILE = dask_sweep.WALL_CLOCK_KEYS


def grid(requests: int) -> dict:
    return {
        "kind": "bench",
        "designs": ["dftl", "mobius", "atomic-write", "txflash-bpcc"],
        "workloads": [{"workload": "randwrite", "requests": requests, "fill": 0.8}],
        "seeds": [1, 2, 3, 4],
    }


def records(frame):
    frame = frame.drop(columns=[c for c in VOLATILE if c in frame.columns])
    frame = frame.sort_values("cell_id").reset_index(drop=True)
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def timed(g: dict, workers: int):
    client = dask_sweep.local_client(workers)
    try:
        start = time.perf_counter()
        frame = dask_sweep.run_sweep(g, client=client)
        return time.perf_counter() - start, frame
    finally:
        client.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args()
    g = grid(a.requests)
    one_s, one = timed(g, 1)
    many_s, many = timed(g, a.workers)
    same = records(one) == records(many)
    speedup = one_s / many_s
    print(f"{len(one)} cells: 1 worker {one_s:.1f} s, {a.workers} workers {many_s:.1f} s, "
          f"speedup {speedup:.2f} (target ≥ {0.8 * a.workers:.1f}); identical results: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
