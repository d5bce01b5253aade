"""The report's figures, drawn with matplotlib from ``mobius compare``'s ``results.json``.

``report_frames(results)`` turns the measured data of each experiment into long-format pandas
DataFrames (one row per measured point); ``report_figures(results, out_dir)`` draws from those
frames the figures the report shows as SVG (Möbius Figs. 7-11, TxFlash Figs. 6 and 8), so they
can be restyled, combined with sweep results or redrawn for a paper. ``results`` is a path to
``results.json``, a directory holding it, or the parsed dictionary. Nothing is recomputed: every
point is a number ``mobius compare`` measured.
"""

from __future__ import annotations

import json
import os
from typing import Any


def _load(results: Any) -> dict:
    if isinstance(results, dict):
        return results
    path = os.fspath(results)
    if os.path.isdir(path):
        path = os.path.join(path, "results.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _split_key(key: str) -> tuple[str, str]:
    head, _, tail = key.partition("/")
    return (head, tail) if tail else ("", head)


def _micro(data: dict) -> list[dict]:
    rows = []
    for key, series in data.items():
        pattern, mode = _split_key(key)
        if pattern == "small cache":
            # "small cache/<pattern>/<mode>": the run with 2 MB of mapping RAM.
            inner, mode = _split_key(mode)
            pattern = f"{inner}_small_cache"
        for i, pages in enumerate(series["pages"]):
            rows.append({"pattern": pattern, "mode": mode, "pages": pages,
                         "latency_ms": series["latency_ms"][i],
                         "bandwidth_mb_s": series["bandwidth_mb_s"][i]})
    return rows


_MACRO_8K = "/8 KB pages/"


def _macro(data: dict, eight_k: bool = False) -> list[dict]:
    """The outcomes at the graded point, ``workload/mode`` (with ``eight_k``, those on 8 KB
    pages, ``workload/8 KB pages/mode``); the clients sweeps and sensitivity runs are not
    outcomes."""
    def outcome(key: str) -> bool:
        if eight_k:
            return _MACRO_8K in key
        return key.count("/") == 1 and not key.endswith(("/clients_sweep", "/merge_small_off"))
    rows = [dict(workload=k.split("/")[0], mode=k.split("/")[-1], **v) for k, v in data.items()
            if outcome(k)]
    if eight_k:
        return rows
    for r in rows:
        base = data.get(f"{r['workload']}/Atomic-Write", {}).get("tps")
        r["tps_vs_atomic_write"] = r["tps"] / base if base else float("nan")
    return rows


def _series(data: dict, label: str, x: str, ys: list[str]) -> list[dict]:
    rows = []
    for name, series in data.items():
        if x not in series:
            continue
        for i, xv in enumerate(series[x]):
            row = {label: name, x: xv}
            row.update({y: series[y][i] for y in ys if y in series})
            rows.append(row)
    return rows


def _optr(data: dict) -> list[dict]:
    rows = []
    for p in data.get("points", []):
        for design in ("wcache", "optr"):
            r = {k: v for k, v in p[design].items() if not isinstance(v, (list, dict))}
            rows.append(dict(locality=p["locality"], size=p["size"],
                             flush_every=p["flush_every"], design=design, **r))
    return rows


def _sqlite(data: list) -> list[dict]:
    rows = [dict(r) for r in data]
    for r in rows:
        base = next((b.get("tps_sim") for b in data if b["workload"] == r["workload"]
                     and b["ftl"] == "dftl" and b["mode"] == "journal"), None)
        tps = r.get("tps_sim")
        r["tps_vs_dftl_journal"] = tps / base if tps is not None and base else float("nan")
        dwrite = " (dwrite)" if r.get("tx_kind") == "dynamic" else ""
        r["setup"] = f"{r['ftl']} {r['mode']}{dwrite}"
    return rows


def report_frames(results: Any) -> dict:
    """DataFrames of the experiments present: ``micro``, ``macro``, ``recovery``,
    ``commit_size``, ``commit_abort``, ``optr`` and ``sqlite``."""
    import pandas as pd
    r = _load(results)
    frames = {}
    if "micro" in r:
        frames["micro"] = pd.DataFrame(_micro(r["micro"]["data"]))
    if "macro" in r:
        frames["macro"] = pd.DataFrame(_macro(r["macro"]["data"]))
        eight_k = _macro(r["macro"]["data"], eight_k=True)
        if eight_k:
            frames["macro_8k"] = pd.DataFrame(eight_k)
        sweeps = [(k.split("/")[0], v) for k, v in r["macro"]["data"].items()
                  if k.endswith("/clients_sweep")]
        if sweeps:
            frames["macro_clients"] = pd.DataFrame([
                {"workload": wl, "mode": mode, "clients": c, "tps": t}
                for wl, v in sweeps for mode, tps in v["tps"].items()
                for c, t in zip(v["clients"], tps)])
    if "recovery" in r:
        frames["recovery"] = pd.DataFrame(_series(
            r["recovery"]["data"], "design", "zone_gb",
            ["recovery_ms", "recovery_with_rebuild_ms", "flash_reads"]))
    if "commit" in r:
        d = r["commit"]["data"]
        frames["commit_size"] = pd.DataFrame(_series(d, "protocol", "tx_pages", ["tx_per_s"]))
        frames["commit_abort"] = pd.DataFrame(_series(
            d, "protocol", "abort_pct", ["tx_time_ms", "recovery_ms"]))
    if "optr" in r and r["optr"]["data"]:
        frames["optr"] = pd.DataFrame(_optr(r["optr"]["data"]))
    if "sqlite" in r and r["sqlite"]["data"]:
        frames["sqlite"] = pd.DataFrame(_sqlite(r["sqlite"]["data"]))
    frames.update(robustness_frames(r))
    if not frames:
        raise ValueError("no experiment with figures in these results (found: "
                         f"{sorted(r)}; expected micro, macro, recovery, commit, optr or sqlite)")
    return frames


def robustness_frames(results: Any) -> dict:
    """The robustness of ``mobius compare --robustness`` (docs/robustness.md) as DataFrames:
    ``robustness`` (one row per graded sub-claim: its verdict and number at the defaults,
    ``pass_fraction`` over ``points`` sampled points, ``flipped_by`` as ``name value`` joined by
    ``; ``, and the same of the claim it belongs to: ``claim_verdict``,
    ``claim_pass_fraction``, where every graded sub-claim of the claim holds at once, and
    ``claim_flipped_by``) and ``robustness_ends`` (one row per sub-claim and one-at-a-time range
    end: the parameter, its value, the number and verdict there, ``flips``). Empty when the
    results have no robustness."""
    import pandas as pd
    r = _load(results)
    rows, ends = [], []
    flipped = lambda rob: "; ".join(f"{e['parameter']} {e['value']}"  # noqa: E731
                                    for e in rob["flipped_by"])
    for experiment, entry in r.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("claims"), list):
            continue
        claim_of = (None, None)  # (the claim's source, words and note; its robustness)
        for c in entry["claims"]:
            which = (c.get("source"), c.get("paper"), c.get("note"))
            if which != claim_of[0]:
                claim_of = (which, c.get("claim_robustness"))
            rob = c.get("robustness")
            if rob is None:
                continue
            whole = claim_of[1]
            key = {"experiment": experiment, "source": c["source"], "claim": c["claim"]}
            rows.append({**key, "verdict": c["verdict"], "measured": c["measured"],
                         "tolerance": c["tolerance"], "pass_fraction": rob["pass_fraction"],
                         "points": rob["points"], "flipped_by": flipped(rob),
                         "claim_verdict": c.get("claim_verdict"),
                         "claim_pass_fraction": whole["pass_fraction"] if whole else None,
                         "claim_flipped_by": flipped(whole) if whole else None})
            for e in rob["ends"]:
                ends.append({**key, "parameter": e["parameter"], "value": e["value"],
                             "measured": e["measured"], "verdict": e["verdict"],
                             "flips": e in rob["flipped_by"]})
    if not rows:
        return {}
    return {"robustness": pd.DataFrame(rows), "robustness_ends": pd.DataFrame(ends)}


def _lines(frame, x, y, by, title, path, logx=False, logy=False):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from . import plot
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    plot(frame, x, y, by, ax=ax, logx=logx, logy=logy, title=title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _bars(frame, x, y, title, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.bar([str(v) for v in frame[x]], frame[y])
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.tick_params(axis="x", labelrotation=30)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report_figures(results: Any, out_dir: str, fmt: str = "png") -> list[str]:
    """Draws every figure the present experiments have into ``out_dir``; returns the paths."""
    frames = report_frames(results)
    os.makedirs(out_dir, exist_ok=True)
    out = lambda name: os.path.join(out_dir, f"{name}.{fmt}")  # noqa: E731
    paths = []
    if "micro" in frames:
        m = frames["micro"]
        for pattern in sorted(m["pattern"].unique()):
            part = m[m["pattern"] == pattern]
            paths.append(_lines(part, "pages", "latency_ms", "mode",
                                f"Möbius Fig. 7 — compound write latency, {pattern}",
                                out(f"fig7_latency_{pattern}"), logy=True))
            paths.append(_lines(part, "pages", "bandwidth_mb_s", "mode",
                                f"Möbius Fig. 8 — compound write bandwidth, {pattern}",
                                out(f"fig8_bandwidth_{pattern}")))
    if "macro" in frames:
        m = frames["macro"]
        for wl in sorted(m["workload"].unique()):
            part = m[m["workload"] == wl]
            paths.append(_bars(part, "mode", "tps_vs_atomic_write",
                               f"Möbius Fig. 9 — TPS normalised to Atomic-Write, {wl}",
                               out(f"fig9_tps_{wl}")))
            paths.append(_bars(part, "mode", "write_amplification",
                               f"Möbius Fig. 10 — write amplification, {wl}",
                               out(f"fig10_wa_{wl}")))
    if "macro_8k" in frames:
        m = frames["macro_8k"]
        for wl in sorted(m["workload"].unique()):
            paths.append(_bars(m[m["workload"] == wl], "mode", "write_amplification",
                               f"Möbius Fig. 10 — write amplification on 8 KB pages, {wl}",
                               out(f"fig10_wa_{wl}_8k")))
    if "macro_clients" in frames:
        m = frames["macro_clients"]
        for wl in sorted(m["workload"].unique()):
            paths.append(_lines(m[m["workload"] == wl], "clients", "tps", "mode",
                                f"TPS against concurrent clients, {wl}",
                                out(f"macro_clients_{wl}"), logx=True))
    if "recovery" in frames:
        paths.append(_lines(frames["recovery"], "zone_gb", "recovery_with_rebuild_ms", "design",
                            "Möbius Fig. 11 — recovery time vs scanning zone",
                            out("fig11_recovery"), logy=True))
    if "commit_size" in frames:
        paths.append(_lines(frames["commit_size"], "tx_pages", "tx_per_s", "protocol",
                            "TxFlash Fig. 6 — throughput vs transaction size",
                            out("txflash_fig6_throughput"), logx=True, logy=True))
        paths.append(_lines(frames["commit_abort"], "abort_pct", "tx_time_ms", "protocol",
                            "TxFlash Fig. 8 — transaction time vs abort rate",
                            out("txflash_fig8_abort_txtime")))
        paths.append(_lines(frames["commit_abort"], "abort_pct", "recovery_ms", "protocol",
                            "TxFlash Fig. 8 — recovery time vs abort rate",
                            out("txflash_fig8_abort_recovery")))
    if "optr" in frames:
        o = frames["optr"].assign(series=lambda f: f["size"] + " " + f["design"])
        for locality in sorted(o["locality"].unique()):
            paths.append(_lines(o[o["locality"] == locality], "flush_every", "mb_s", "series",
                                f"OPTR Fig. 13 ({locality} locality) — throughput vs flush interval",
                                out(f"optr_fig13_{locality}"), logx=True))
    if "sqlite" in frames:
        q = frames["sqlite"]
        for wl in sorted(q["workload"].unique()):
            paths.append(_bars(q[q["workload"] == wl], "setup", "tps_vs_dftl_journal",
                               f"SQLite TPS / DFTL rollback journal, {wl}",
                               out(f"sqlite_tps_{wl}")))
    return paths
