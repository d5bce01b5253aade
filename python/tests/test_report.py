"""The report's figures redrawn with matplotlib from `mobius compare`'s results.json
(mobius.report_frames / mobius.report_figures; docs/python.md)."""

import json
import math
import os
import subprocess

import pytest

import mobius


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    exe = os.environ.get("MOBIUS_BIN")
    if not exe:
        pytest.skip("MOBIUS_BIN (the mobius binary) not set: run through cargo test")
    out = tmp_path_factory.mktemp("compare")
    subprocess.run([exe, "compare", "--only", "macro", "--only", "commit", "--out", str(out)],
                   check=True, capture_output=True)
    return out


def test_frames_hold_the_numbers_the_report_graded(results):
    frames = mobius.report_frames(results)
    assert set(frames) == {"macro", "macro_8k", "macro_clients", "commit_size", "commit_abort"}
    clients = frames["macro_clients"]
    assert sorted(clients.clients.unique()) == [1, 2, 4, 8, 16, 32]
    # The graded point (one client) is the experiment's own run.
    one = clients[(clients.clients == 1) & (clients.workload == "tpcc-like")
                  & (clients["mode"] == "Möbius A-SWRITE")]
    graded_runs = frames["macro"]
    assert math.isclose(one["tps"].item(), graded_runs[(graded_runs.workload == "tpcc-like")
                        & (graded_runs["mode"] == "Möbius A-SWRITE")]["tps"].item(),
                        rel_tol=1e-12)
    assert len(frames["macro_8k"]) == len(graded_runs)
    # Fig. 9 is graded on the engine traces (experiment macro-engines); macro grades Fig. 10,
    # on 8 KB pages.
    graded = json.loads((results / "results.json").read_text())["macro"]["claims"]
    want = next(c["measured"] for c in graded
                if c["claim"] == "Möbius S-SWRITE / Atomic-Write WA, 8 KB pages (tpcc-like)")
    m8k = frames["macro_8k"]
    tpcc_8k = m8k[m8k.workload == "tpcc-like"]
    wa = {mode: tpcc_8k[tpcc_8k["mode"] == mode]["write_amplification"].item()
          for mode in ("Möbius S-SWRITE", "Atomic-Write")}
    assert math.isclose(wa["Möbius S-SWRITE"] / wa["Atomic-Write"], want, rel_tol=1e-12)
    m = frames["macro"]
    tpcc = m[m.workload == "tpcc-like"]
    a = tpcc[tpcc["mode"] == "Möbius A-SWRITE"]
    aw = tpcc[tpcc["mode"] == "Atomic-Write"]
    assert math.isclose(a["tps_vs_atomic_write"].item(), a["tps"].item() / aw["tps"].item(),
                        rel_tol=1e-12)
    sizes = frames["commit_size"]
    assert sorted(sizes.protocol.unique()) == ["BPCC", "SCC", "TC"]


def test_figures_are_drawn_for_every_experiment_present(results, tmp_path):
    paths = mobius.report_figures(results, str(tmp_path / "figs"))
    names = sorted(os.path.basename(p) for p in paths)
    assert names == sorted([
        "fig9_tps_tpcc-like.png", "fig10_wa_tpcc-like.png", "fig9_tps_ext4-trace.png",
        "fig10_wa_ext4-trace.png", "macro_clients_tpcc-like.png", "macro_clients_ext4-trace.png",
        "fig10_wa_tpcc-like_8k.png", "fig10_wa_ext4-trace_8k.png", "txflash_fig6_throughput.png",
        "txflash_fig8_abort_txtime.png", "txflash_fig8_abort_recovery.png"])
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", p


def test_recovery_and_micro_data_are_drawn(tmp_path):
    data = {
        "recovery": {"data": {"LightTx (zones)": {
            "zone_gb": [0.5, 4.0], "recovery_ms": [600.0, 2100.0],
            "recovery_with_rebuild_ms": [600.0, 2100.0], "flash_reads": [7, 9]}}},
        "micro": {"data": {"random/DFTL (batched)": {
            "pages": [32, 64], "latency_ms": [3.0, 5.0], "bandwidth_mb_s": [42.0, 51.0]}}},
    }
    frames = mobius.report_frames(data)
    assert frames["recovery"]["recovery_ms"].tolist() == [600.0, 2100.0]
    assert frames["micro"]["pattern"].tolist() == ["random", "random"]
    paths = mobius.report_figures(data, str(tmp_path), fmt="svg")
    assert {os.path.basename(p) for p in paths} == {
        "fig11_recovery.svg", "fig7_latency_random.svg", "fig8_bandwidth_random.svg"}


def test_optr_and_sqlite_data_are_drawn(tmp_path):
    point = {"mb_s": 10.0, "erases": 3, "metrics": [["x", 1.0]]}
    data = {
        "optr": {"data": {"points": [
            {"locality": "high", "size": "small", "flush_every": f, "optr": point,
             "wcache": dict(point, mb_s=11.0)} for f in (1, 16)]}},
        "sqlite": {"data": [
            {"workload": "kv", "ftl": "dftl", "mode": "journal", "tx_kind": "static",
             "tps_sim": 100.0},
            {"workload": "kv", "ftl": "mobius", "mode": "batch", "tx_kind": "dynamic",
             "tps_sim": 250.0},
            {"workload": "kv", "ftl": "optr", "mode": "nobarrier", "tx_kind": "static",
             "tps_sim": None}]},
    }
    frames = mobius.report_frames(data)
    assert frames["optr"].shape[0] == 4 and "metrics" not in frames["optr"].columns
    q = frames["sqlite"].set_index("setup")["tps_vs_dftl_journal"]
    assert q["mobius batch (dwrite)"] == 2.5 and q["dftl journal"] == 1.0
    assert math.isnan(q["optr nobarrier"])
    paths = mobius.report_figures(data, str(tmp_path))
    assert {os.path.basename(p) for p in paths} == {"optr_fig13_high.png", "sqlite_tps_kv.png"}


def test_results_without_figures_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no experiment with figures"):
        mobius.report_frames({"sqlite": {"data": []}})
    with pytest.raises(FileNotFoundError):
        mobius.report_frames(tmp_path / "missing")


def test_robustness_frames_read_each_graded_sub_claim_and_its_ends():
    end = lambda p, v, m, verdict: {"parameter": p, "value": v, "measured": m,  # noqa: E731
                                     "verdict": verdict}
    flip = end("clients", "= 1", 1.1, "FAIL")
    whole = {"pass_fraction": 0.5, "points": 4, "flipped_by": [flip, end("program", "× 0.5",
                                                                             None, "FAIL")],
             "ends": []}
    claim = {"source": "Möbius §V", "paper": "p", "claim": "A / B TPS", "measured": 1.6,
             "tolerance": "≥ 1.300", "verdict": "PASS", "claim_verdict": "PASS",
             "robustness": {"pass_fraction": 0.75, "points": 4, "flipped_by": [flip],
                            "ends": [flip, end("clients", "= 32", 2.5, "PASS")]}}
    # An experiment with no figure frames of its own (campaigns): only the robustness frames.
    results = {"campaigns": {"claims": [{**claim, "claim_robustness": whole},
                                        {**claim, "verdict": "NOT-REPRODUCED",
                                         "robustness": None}]},
               "summary": []}
    frames = mobius.report_frames(results)
    assert set(frames) == {"robustness", "robustness_ends"}
    r = frames["robustness"]
    assert len(r) == 1
    assert r.pass_fraction.item() == 0.75 and r.flipped_by.item() == "clients = 1"
    assert r.claim_pass_fraction.item() == 0.5
    assert r.claim_flipped_by.item() == "clients = 1; program × 0.5"
    # Results of a campaign before claims had their own robustness: no claim share.
    old = {"campaigns": {"claims": [claim]}, "summary": []}
    assert mobius.report_frames(old)["robustness"].claim_pass_fraction.isna().all()
    e = frames["robustness_ends"]
    assert list(e.flips) == [True, False]
    assert list(e.value) == ["= 1", "= 32"]
