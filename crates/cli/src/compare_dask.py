"""`mobius compare --scheduler ADDR | --workers N`: each experiment as one Dask task.

Run by the `mobius` binary as ``python3 -c <this file> JOB`` where JOB is a JSON object:
``{"mobius": path of the binary, "scale", "seed", "experiments": [ids], "out": dir,
"scheduler": address or null, "workers": LocalCluster size or null}``.

Each task runs ``mobius compare --only ID --jobs 1`` (one core: the worker's) into a temporary
directory on its worker and hands back the files it wrote (report.md, results.json, the SVGs),
so workers need no shared file system, only the same binary at the same path. The driver writes each part under
``OUT/parts/ID/`` as it finishes; the binary then assembles the report from the parts. An
experiment is deterministic for its seed, so the assembled report equals a one-process run's.

With ``"cells"`` in JOB (``mobius compare --robustness``) each task is one cell instead: one
experiment at one point of the table of unknowns (``{"key", "experiment", "label", "spec",
"part"}``); each finished cell is written at once to ``OUT/robustness/cells/KEY.json`` (and a
default cell's files to ``OUT/parts/ID/``), and a cell already written without an error is not run
again (resume).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


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


def run_cell(mobius, scale, seed, cell):
    """One cell of ``mobius compare --robustness``: the experiment at the cell's point of the
    table of unknowns (``--unknowns``); its results.json (and, for a default cell, every file)."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        code, log, cpu_s = run_measured(
            [mobius, "compare", "--scale", scale, "--seed", str(seed), "--only",
             cell["experiment"], "--jobs", "1", "--unknowns", cell["spec"], "--out", d])
        files = {}
        if code == 0:
            for name in os.listdir(d):
                if cell["part"] or name == "results.json":
                    with open(os.path.join(d, name), "rb") as f:
                        files[name] = f.read()
    return cell, code, log, files, (time.perf_counter() - start, cpu_s)


def run_measured(args):
    """Runs `args` to its end: its exit code, its output (stdout and stderr together) and the
    CPU seconds of that process and its children alone (`wait4`'s own rusage, so a cell's CPU
    time is its own whatever else this process runs: the workers of a LocalCluster are threads
    of one process, where RUSAGE_CHILDREN would count every worker's cells)."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    log = p.stdout.read().decode(errors="replace")
    p.stdout.close()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, log, usage.ru_utime + usage.ru_stime


def cell_done(out, cell):
    """Whether an earlier run finished the cell (resume): its record without an error, and for a
    default cell its part."""
    path = os.path.join(out, "robustness", "cells", cell["key"] + ".json")
    try:
        with open(path) as f:
            if json.load(f)["error"] is not None:
                return False
    except (OSError, ValueError, KeyError):
        return False
    return not cell["part"] or os.path.exists(
        os.path.join(out, "parts", cell["experiment"], "report.md"))


def write_atomic(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def keep_cell(out, cell, code, log, files, times):
    """Writes the cell's record (``robustness/cells/KEY.json``: the cell, its wall and CPU time,
    its error or its experiment's claims, the parameters it consulted and what its point made of
    the page size and the GC mark) and a default cell's part."""
    record = {"cell": {k: cell[k] for k in ("experiment", "label", "spec")},
              "wall_s": times[0], "cpu_s": times[1], "error": None, "claims": [],
              "consulted": [], "applied": {}}
    if code != 0:
        record["error"] = f"exit {code}: {log[-2000:]}"
    else:
        results = json.loads(files["results.json"])
        experiment = results[cell["experiment"]]
        record["claims"] = experiment["claims"]
        if not experiment["claims"] and experiment.get("skipped"):
            # The experiment failed at this point (`ExperimentResult::failed`): a failed cell,
            # not a point that graded nothing in silence.
            record["error"] = "the experiment failed: " + "; ".join(experiment["skipped"])
        record["consulted"] = results["unknowns"]["consulted"]
        record["applied"] = results["unknowns"].get("applied", {})
        if cell["part"]:
            target = os.path.join(out, "parts", cell["experiment"])
            shutil.rmtree(target, ignore_errors=True)
            os.makedirs(target)
            for name, data in files.items():
                with open(os.path.join(target, name), "wb") as f:
                    f.write(data)
    cells = os.path.join(out, "robustness", "cells")
    os.makedirs(cells, exist_ok=True)
    write_atomic(os.path.join(cells, cell["key"] + ".json"), json.dumps(record).encode())
    return record["error"] is None


def run_cells(job, client):
    from dask.distributed import as_completed
    todo = [c for c in job["cells"] if not cell_done(job["out"], c)]
    skipped = len(job["cells"]) - len(todo)
    if skipped:
        print(f"compare: {skipped} cell(s) already done (resumed)", file=sys.stderr)
    futures = [client.submit(run_cell, job["mobius"], job["scale"], job["seed"], c,
                             key=f"robustness-{c['key']}", pure=False) for c in todo]
    failed = []
    for n, fut in enumerate(as_completed(futures), 1):
        cell, code, log, files, times = fut.result()
        ok = keep_cell(job["out"], cell, code, log, files, times)
        mark = "" if ok else f" FAILED (exit {code})"
        print(f"compare: cell {cell['experiment']} {cell['label']} {times[0]:.1f} s "
              f"({times[1]:.1f} s CPU) ({n}/{len(futures)}){mark}", file=sys.stderr, flush=True)
        if not ok:
            failed.append(cell["key"])
    return failed


def run_experiments(job, client):
    from dask.distributed import as_completed
    parts = os.path.join(job["out"], "parts")
    failed = []
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
    if failed:
        print(f"compare: failed experiments: {', '.join(failed)}", file=sys.stderr)
    return failed


def main():
    job = json.load(sys.stdin)  # the job on stdin: one argv element is limited to 128 KiB
    from dask.distributed import Client, LocalCluster

    if job["scheduler"]:
        client = Client(job["scheduler"])
        cluster = None
    else:
        n = job["workers"] or os.cpu_count() or 1
        # Workers as threads of this process: a task only waits on its `mobius` subprocess
        # (no GIL held), and worker and nanny processes would cost CPU beside the cells (each
        # event loop a few per cent of a core, which two busy workers on two cores pay for).
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=False,
                               dashboard_address=None)
        client = Client(cluster)
    try:
        if "cells" in job:
            # A failed cell is recorded with its error; the campaign goes on and reports it.
            run_cells(job, client)
            failed = []
        else:
            failed = run_experiments(job, client)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    if failed:
        sys.exit(1)


if __name__ == "__main__":  # `python3 -c SOURCE` runs it as __main__; a test imports it
    main()
