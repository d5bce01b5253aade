"""The Python API round trip, its errors, and determinism across processes (docs/python.md)."""

import json
import subprocess
import sys

import pytest

import mobius
from mobius.dask_sweep import WALL_CLOCK_KEYS

VOLATILE = set(WALL_CLOCK_KEYS)


def page(d, byte):
    return bytes([byte]) * d.page_bytes


def test_designs_and_presets_list_what_the_cli_knows():
    names = [d["name"] for d in mobius.designs()]
    assert "mobius" in names and "dftl" in names and len(names) == 10 and "fast" in names
    presets = mobius.presets()
    assert presets["jasmine"]["host"]["link_mb_s"] == 95
    assert presets["small"]["geometry"]["page_bytes"] == 4096


def test_a_committed_transaction_survives_a_power_cut():
    d = mobius.open(ftl="mobius", preset="small")
    tx = d.begin()
    tx.write(7, page(d, 1) + page(d, 2))
    ack, durable = tx.commit(sync=True)
    assert durable == ack and d.now_ns >= ack
    d.crash()
    assert d.read(7, 2) == page(d, 1) + page(d, 2)
    assert d.read(9) == bytes(d.page_bytes)  # never written: zeros


def test_a_power_cut_before_the_acknowledgement_keeps_the_transaction_whole():
    for at_offset in range(1, 400_000, 50_000):
        d = mobius.open(ftl="mobius", preset="small")
        start = d.now_ns
        tx = d.begin()
        for k in range(4):
            tx.write(k, page(d, 9))
        ack, _ = tx.commit(sync=True)
        cut = min(start + at_offset, ack - 1)
        d.crash(at=cut)
        got = d.read(0, 4)
        assert got in (page(d, 9) * 4, bytes(4 * d.page_bytes)), f"cut at {cut}: torn transaction"


def test_a_dynamic_transaction_reaches_the_device_and_its_abort_undoes_it():
    d = mobius.open(ftl="mobius", preset="small")
    d.write(3, page(d, 5))
    d.flush()
    tx = d.begin(dynamic=True)
    tx.write(3, page(d, 6))
    tx.write(4, page(d, 7))  # sends lpn 3 as HEAD
    assert tx.abort() is not None  # the device's ABORT
    assert d.read(3) == page(d, 5)
    tx = d.begin(dynamic=True)
    tx.write(3, page(d, 6))
    tx.write(4, page(d, 7))
    tx.commit()
    d.crash()
    assert d.read(3, 2) == page(d, 6) + page(d, 7)
    assert d.sread(3) == page(d, 6)


def test_an_async_commit_is_atomic_at_once_and_durable_later():
    d = mobius.open(ftl="mobius", preset="small")
    with d.begin() as tx:
        tx.write(0, page(d, 1))
    tx = d.begin()
    tx.write(10, page(d, 3) * 40)
    ack, durable = tx.commit(sync=False)
    assert durable >= ack


def test_stats_count_flash_work():
    d = mobius.open(ftl="dftl")
    d.write(0, page(d, 1) * 8)
    s = d.stats()
    assert s["design"] == "dftl" and s["flash_programs"] >= 8


def test_an_image_keeps_its_data_and_refuses_another_design(tmp_path):
    img = tmp_path / "dev.img"
    d = mobius.open(ftl="dftl", image=img)
    d.write(1, page(d, 4))
    d.flush()
    del d
    again = mobius.open(ftl="dftl", image=img)
    assert again.read(1) == page(again, 4)
    del again
    with pytest.raises(mobius.ImageError):
        mobius.open(ftl="mobius", image=img)


def test_bad_input_raises_typed_exceptions_not_crashes():
    d = mobius.open(ftl="mobius")
    with pytest.raises(mobius.AddressError):
        d.write(d.logical_pages, page(d, 1))
    with pytest.raises(mobius.AddressError):
        d.write(0, b"short")
    with pytest.raises(mobius.ConfigError):
        mobius.open(ftl="no-such-design")
    with pytest.raises(mobius.ConfigError):
        mobius.open(preset="no-such-preset")
    with pytest.raises(mobius.ConfigError):
        mobius.open(set={"geometry.no_such_field": 1})
    with pytest.raises(mobius.ConfigError):
        mobius.open(params={"no_such_param": 1})
    with pytest.raises(mobius.ConfigError):
        mobius.bench("dftl", requests=10, no_such_option=3)
    with pytest.raises(mobius.ConfigError):  # a soak would ignore them: refused, not dropped
        mobius.crashtest("dftl", seeds=1, requests=100, crash_points=10)
    with pytest.raises(mobius.ConfigError):
        mobius.crashtest("all", preset="txflash", crash_points=10)
    with pytest.raises(mobius.ConfigError):
        mobius.open(ftl="dftl").begin()
    aw = mobius.open(ftl="atomic-write")
    tx = aw.begin()
    tx.write(0, page(aw, 1) * (aw.capabilities()["max_tx_pages"] + 1))
    with pytest.raises(mobius.TooLargeError):
        tx.commit()
    assert issubclass(mobius.TooLargeError, mobius.MobiusError)


def test_bench_and_crashtest_return_the_cli_keys():
    r = mobius.bench("dftl", requests=300, fill=0.5, seed=3)
    for key in ("write_amplification", "iops", "latency_us", "recovery_sim_ms", "tps"):
        assert key in r
    c = mobius.crashtest("dftl", requests=200, fill=0.5, crash_points=40, torn=True, seed=2)
    assert c["crash_points"] == 40 and c["violations"] == 0
    s = mobius.crashtest("wcache", seed=5, seeds=2, crash_points=30)
    assert s["seeds"] == 2 and "designs" in s


def cli_bench():
    out = subprocess.run(
        [sys.executable, "-c",
         "import json, mobius; print(json.dumps(mobius.bench('mobius', requests=400, fill=0.6, seed=11)))"],
        check=True, capture_output=True, text=True)
    return {k: v for k, v in json.loads(out.stdout).items() if k not in VOLATILE}


def test_results_are_the_same_in_every_process():
    assert cli_bench() == cli_bench()


def test_results_frame_flattens_nested_keys():
    frame = mobius.results_frame([mobius.bench("dftl", requests=100, no_recovery=True)])
    assert "latency_us.p99" in frame.columns and len(frame) == 1


def test_a_results_frame_draws_with_matplotlib(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    rows = [mobius.bench(ftl, requests=200, fill=0.5, seed=s, no_recovery=True)
            for ftl in ("dftl", "mobius") for s in (1, 2)]
    frame = mobius.results_frame(rows)
    ax = mobius.plot(frame, x="seed", y="write_amplification", by="ftl", title="WA")
    assert [line.get_label() for line in ax.get_lines()] == ["dftl", "mobius"]
    assert ax.get_ylabel() == "write_amplification"
    # The plotted points are the measured values (one per seed here).
    dftl = frame[frame["ftl"] == "dftl"].sort_values("seed")["write_amplification"].tolist()
    assert list(ax.get_lines()[0].get_ydata()) == dftl
    out = tmp_path / "wa.png"
    ax.figure.savefig(out)
    assert out.stat().st_size > 1000
    with pytest.raises(mobius.ConfigError):
        mobius.plot(frame, x="seed", y="no_such_column")


def test_bench_can_report_its_speed_against_the_peer():
    r = mobius.bench("dftl", requests=300, fill=0.5, no_recovery=True, peer=True)
    assert r["speed_vs_peer"] > 0 and r["peer_page_programs_per_s"] > 0
    assert "peer_page_programs_per_s" not in mobius.bench("dftl", requests=100, no_recovery=True)


def test_an_image_open_in_a_device_is_refused_to_another(tmp_path):
    img = tmp_path / "dev.img"
    d = mobius.open(ftl="dftl", image=img)
    with pytest.raises(mobius.ImageError, match="already open"):
        mobius.open(ftl="dftl", image=img)
    del d
    mobius.open(ftl="dftl", image=img)


def test_a_page_the_media_lost_raises_media_error_never_bytes():
    d = mobius.open(ftl="dftl", media="mlc", wear=1.0)
    d.write(5, page(d, 3))
    d.flush()
    assert d.read(5) == page(d, 3)  # fresh: the ECC corrects it
    d.idle(600)  # 600 days at the part's rated wear: beyond the ECC after every retry
    with pytest.raises(mobius.MediaError) as lost:
        d.read(5)
    assert isinstance(lost.value, mobius.MobiusError)
    assert d.stats()["media"]["uncorrectable_reads"] >= 1
    off = mobius.open(ftl="dftl")  # the model off: flash keeps what it was given
    off.write(5, page(off, 3))
    off.idle(600)
    assert off.read(5) == page(off, 3) and "media" not in off.stats()
    for bad in ({"media": "qlc"}, {"wear": 1.0}, {"media": "mlc", "wear": -1.0}):
        with pytest.raises(mobius.ConfigError):
            mobius.open(ftl="dftl", **bad)
    with pytest.raises(mobius.ConfigError):
        d.idle(-1)


def test_crashtest_takes_the_cut_model_and_the_media_model():
    kw = dict(requests=200, fill=0.5, crash_points=30, torn=True, seed=2)
    instant = mobius.crashtest("dftl", **kw)
    prefix = mobius.crashtest("dftl", cut_model="prefix", **kw)
    assert "cut_model" not in instant and prefix["cut_model"] == "prefix"
    assert prefix["violations"] == 0 and prefix["crash_points"] > 0
    with pytest.raises(mobius.ConfigError):
        mobius.crashtest("dftl", cut_model="sideways", **kw)
    worn = mobius.crashtest("dftl", media="mlc", wear=1.0, power_off_days=300, **kw)
    assert worn["media"]["part"] == "mlc" and worn["violations"] == 0
    assert "media" not in instant
