"""`mobius compare --scheduler ADDR | --workers N`: each experiment as one Dask task.

Run by the `mobius` binary as ``python3 -c <this file> JOB`` where JOB is a JSON object:
``{"mobius": path of the binary, "scale", "seed", "experiments": [ids], "out": dir,
"scheduler": address or null, "workers": LocalCluster size or null}``.

Each task runs ``mobius compare --only ID --jobs 1`` (one core: the worker's) into a temporary
directory on its worker and hands back the files it wrote (report.md, results.json, the SVGs),
so workers need no shared file system, only the same binary at the same path. The driver writes each part under
``OUT/parts/ID/`` as it finishes; the binary then assembles the report from the parts. An
experiment is deterministic for its seed, so the assembled report equals a one-process run's.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile


def run_part(mobius, scale, seed, experiment):
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run(
            [mobius, "compare", "--scale", scale, "--seed", str(seed),
             "--only", experiment, "--jobs", "1", "--out", d],
            capture_output=True, text=True,
        )
        files = {}
        if p.returncode == 0:
            for name in os.listdir(d):
                with open(os.path.join(d, name), "rb") as f:
                    files[name] = f.read()
        return experiment, p.returncode, p.stdout + p.stderr, files


def main():
    job = json.loads(sys.argv[1])
    from dask.distributed import Client, LocalCluster, as_completed

    if job["scheduler"]:
        client = Client(job["scheduler"])
        cluster = None
    else:
        n = job["workers"] or os.cpu_count() or 1
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        client = Client(cluster)
    parts = os.path.join(job["out"], "parts")
    failed = []
    try:
        futures = [
            client.submit(run_part, job["mobius"], job["scale"], job["seed"], e,
                          key=f"compare-{e}-{job['scale']}-{job['seed']}", pure=False)
            for e in job["experiments"]
        ]
        done = 0
        for fut in as_completed(futures):
            experiment, code, log, files = fut.result()
            done += 1
            target = os.path.join(parts, experiment)
            shutil.rmtree(target, ignore_errors=True)
            if code != 0:
                failed.append(experiment)
                print(f"compare: {experiment} failed (exit {code}):\n{log}", file=sys.stderr)
                continue
            os.makedirs(target)
            for name, data in files.items():
                with open(os.path.join(target, name), "wb") as f:
                    f.write(data)
            print(f"compare: {experiment} done ({done}/{len(futures)})", file=sys.stderr)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    if failed:
        print(f"compare: failed experiments: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)


main()
