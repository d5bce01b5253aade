"""The Dask driver of `mobius compare --workers/--robustness` (crates/cli/src/compare_dask.py):
a cell's CPU time is its own process's, whatever else the driver runs beside it."""

import importlib.machinery
import importlib.util
import json
import os
import sys
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def driver():
    path = os.path.join(ROOT, "crates", "cli", "src", "compare_dask.py")
    loader = importlib.machinery.SourceFileLoader("compare_dask", path)
    spec = importlib.util.spec_from_loader("compare_dask", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_two_cells_side_by_side_each_count_their_own_cpu():
    d = driver()
    results = {}

    def cell(name, seconds):
        results[name] = d.run_measured([sys.executable, "-c", BUSY.format(s=seconds)])

    threads = [threading.Thread(target=cell, args=(n, s)) for n, s in (("short", 0.3), ("long", 1.2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    short, long = results["short"][2], results["long"][2]
    # Each child burns its own CPU. The process-wide RUSAGE_CHILDREN over the long cell's
    # window would count the short child too, reaped inside it (about 1.55 s).
    assert 0.25 < short < 0.6, short
    assert 1.15 < long < 1.45, long


def test_a_failing_command_gives_its_exit_code_and_output():
    d = driver()
    code, log, cpu = d.run_measured([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert code == 3
    assert "out" in log
    assert cpu >= 0


def keep(d, tmp_path, experiment_entry):
    cell = {"key": "optr.lhs-002.x", "experiment": "optr", "label": "lhs-002", "spec": "op=1",
            "part": False}
    results = {"optr": experiment_entry, "unknowns": {"consulted": ["fill"]}}
    ok = d.keep_cell(str(tmp_path), cell, 0, "", {"results.json": json.dumps(results).encode()},
                     (1.0, 1.0))
    with open(tmp_path / "robustness" / "cells" / "optr.lhs-002.x.json") as f:
        return ok, json.load(f)


def test_an_experiment_that_failed_at_its_point_is_a_failed_cell(tmp_path):
    d = driver()
    ok, record = keep(d, tmp_path, {"claims": [], "skipped": ["not reached within 4 writes"]})
    assert not ok
    assert "not reached within 4 writes" in record["error"]
    assert record["consulted"] == ["fill"]
    # and an experiment that graded its claims, with a part skipped, is not
    ok, record = keep(d, tmp_path, {"claims": [{"verdict": "PASS"}], "skipped": ["a part"]})
    assert ok and record["error"] is None
