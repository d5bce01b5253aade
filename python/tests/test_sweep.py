"""Sweeps on Dask equal the serial run cell by cell; an interrupted sweep resumes; a crash soak
split across workers equals the one-process soak (docs/python.md)."""

import json

import pytest

import mobius
from mobius import dask_sweep as sweep

GRID = {
    "kind": "bench",
    "designs": ["dftl", "mobius"],
    "presets": ["small"],
    "params": [{}],
    "workloads": [{"workload": "randwrite", "requests": 300, "fill": 0.5}],
    "seeds": [1, 2],
    "options": {"no_recovery": True},
}


def comparable(frame):
    keep = [c for c in frame.columns
            if c not in sweep.WALL_CLOCK_KEYS]
    frame = frame[keep].sort_values("cell_id").reset_index(drop=True)
    # NaN (a metric another design has) never equals itself: compare it as None.
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


@pytest.fixture(scope="module")
def client():
    c = sweep.local_client(2)
    yield c
    c.close()


def test_cells_are_the_product_of_the_grid_and_unknown_keys_are_refused():
    cells = sweep.cells(GRID)
    assert len(cells) == 4 and len({c["cell_id"] for c in cells}) == 4
    with pytest.raises(mobius.ConfigError):
        sweep.cells({**GRID, "desings": ["dftl"]})
    with pytest.raises(mobius.ConfigError):
        sweep.cells({**GRID, "kind": "plot"})


def test_a_local_cluster_sweep_equals_the_serial_sweep(client, tmp_path):
    serial = sweep.run_sweep(GRID, out=tmp_path / "serial", serial=True)
    parallel = sweep.run_sweep(GRID, client=client, out=tmp_path / "dask")
    assert len(serial) == 4 and serial["error"].isna().all()
    assert comparable(serial) == comparable(parallel)


def test_a_failed_cell_records_its_error_and_seed_and_the_sweep_goes_on(tmp_path):
    grid = {**GRID, "designs": ["dftl", "no-such-design"], "seeds": [7]}
    frame = sweep.run_sweep(grid, out=tmp_path, serial=True)
    bad = frame[frame["ftl"] == "no-such-design"].iloc[0]
    assert "unknown design" in bad["error"] and bad["seed"] == 7
    assert frame[frame["ftl"] == "dftl"]["error"].isna().all()


def test_an_interrupted_sweep_resumes_from_its_finished_cells(tmp_path):
    first = sweep.run_sweep(GRID, out=tmp_path, serial=True)
    parts = sorted((tmp_path / "cells").glob("*.parquet"))
    kept = {p.stem for p in parts[:2]}
    for p in parts[2:]:
        p.unlink()  # as if the sweep had stopped after two cells
    ran = []
    original = sweep.run_cell
    sweep.run_cell = lambda c: ran.append(c["cell_id"]) or original(c)
    try:
        resumed = sweep.run_sweep(GRID, out=tmp_path, serial=True)
    finally:
        sweep.run_cell = original
    assert len(ran) == 2 and not kept & set(ran)
    assert comparable(first) == comparable(resumed)


def test_a_crash_soak_split_across_workers_equals_the_one_process_soak(client):
    kw = dict(seed=41, seeds=2, crash_points=40, torn=True)
    alone = mobius.crashtest("all", **kw)
    split = mobius.crashtest("all", client=client, **kw)
    strip = lambda r: json.loads(json.dumps(
        {k: v for k, v in r.items() if k not in ("wall_s", "speed")}))
    for f in alone["failures"] + split["failures"]:
        f.pop("wall_s", None)
        f.pop("phases", None)
    assert strip(alone) == strip(split)
    assert alone["seeds"] == 2 * len(mobius.designs())


def test_the_merge_reports_failures_it_is_given():
    cell = {"seeds": 1, "failing_seeds": [5], "crash_points": 10, "violations": 2,
            "designs": {"x": {"seeds": 1, "failing_seeds": [5], "crash_points": 10,
                              "violations": 2}},
            "failures": [{"design": "x", "seed": 5}], "wall_s": 1.0}
    ok = {"seeds": 1, "failing_seeds": [], "crash_points": 10, "violations": 0,
          "designs": {"x": {"seeds": 1, "failing_seeds": [], "crash_points": 10,
                            "violations": 0}},
          "failures": [], "wall_s": 1.0}
    merged = sweep.merge_soaks([ok, cell], 0.0)
    assert merged["violations"] == 2 and merged["failing_seeds"] == [5]
    assert merged["designs"]["x"]["seeds"] == 2 and len(merged["failures"]) == 1


def test_the_command_line_runs_a_spec(tmp_path):
    spec = tmp_path / "sweep.toml"
    spec.write_text('[sweep]\nkind = "bench"\ndesigns = ["dftl"]\nseeds = 2\n'
                    'options = { no_recovery = true }\n'
                    '[[sweep.workloads]]\nworkload = "randwrite"\nrequests = 100\n')
    assert sweep.main(["--spec", str(spec), "--out", str(tmp_path / "out"), "--workers", "0"]) == 0
    assert len(sweep.load(tmp_path / "out")) == 2


def test_a_campaign_split_across_workers_equals_the_one_process_campaign(client):
    kw = dict(seed=12, crash_points=200, torn=True, requests=500, fill=0.5)
    alone = mobius.crashtest("dftl", **kw)
    split = mobius.crashtest("dftl", client=client, **kw)
    for r in (alone, split):
        r.pop("wall_s")
        r.pop("crash_points_per_s")
        r.pop("speed")
    assert alone == split
    # With violations (a negative control), their order and details match too.
    kw.update(params={"oob_scan": "off"}, promise="durable-writes")
    alone = mobius.crashtest("dftl", **kw)
    split = mobius.crashtest("dftl", client=client, **kw)
    assert alone["violations"] > 0
    for r in (alone, split):
        r.pop("wall_s")
        r.pop("crash_points_per_s")
        r.pop("speed")
    assert alone == split
