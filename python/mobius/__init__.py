"""mobius: a transactional flash SSD built in software, from Python.

The simulations run in Rust (``mobius._native``) with the GIL released; the functions here
mirror the command line (``mobius bench --json``, ``mobius crashtest --json``) keyword for
keyword, and return the same dictionaries. See docs/python.md.

    >>> import mobius
    >>> d = mobius.open(ftl="mobius", preset="small")
    >>> tx = d.begin(); tx.write(7, b"a" * d.page_bytes); tx.commit(sync=True)
    >>> d.crash()                       # power cut now, then recovery
    >>> d.read(7)[:1]
    b'a'
"""

from __future__ import annotations

from typing import Any, Iterable

from . import _native
from ._native import (
    AddressError,
    ConfigError,
    DeviceFullError,
    ImageError,
    MediaError,
    MobiusError,
    TooLargeError,
    TransactionError,
)

__all__ = [
    "designs", "presets", "bench", "crashtest", "open", "Device", "Transaction",
    "results_frame", "plot", "sweep", "MobiusError", "ConfigError", "AddressError", "TooLargeError",
    "DeviceFullError", "TransactionError", "ImageError", "MediaError",
]

#: Workload options of ``bench`` and ``crashtest``, named as the CLI's flags.
WORKLOAD_OPTIONS = frozenset({
    "workload", "requests", "request_pages", "range_pages", "qd", "fill", "flush_every",
    "read_fraction", "abort_fraction", "locality_pages", "min_tx_pages", "trim_fraction",
    "interleave_fraction",
})


def designs() -> list[dict]:
    """Every design: ``name``, ``summary``, ``promise``, ``default_workload``."""
    return _native.designs()


def presets() -> dict[str, dict]:
    """Every device preset's configuration, by name."""
    return _native.presets()


def _split(kw: dict[str, Any]) -> dict[str, Any]:
    unknown = set(kw) - WORKLOAD_OPTIONS
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)}; workload options: "
                          f"{sorted(WORKLOAD_OPTIONS)}")
    return {k: v for k, v in kw.items() if v is not None}


def _strs(d: dict | None) -> dict[str, str] | None:
    return None if d is None else {str(k): str(v) for k, v in d.items()}


def bench(ftl: str, preset: str = "small", *, params: dict | None = None,
          set: dict | None = None, seed: int = 1, full_data: bool = False,
          no_recovery: bool = False, peer: bool = False, **workload: Any) -> dict:
    """``mobius bench --json``: a seeded workload on a design, in simulated time.

    ``params`` are the design's ``--param`` pairs, ``set`` the device's ``--set`` overrides;
    workload options (``workload=``, ``requests=``, ``fill=``, ``qd=``, ...) as the CLI names them.
    ``peer=True`` also plays the requests on the in-process peer (``speed_vs_peer``).
    """
    return _native.bench(ftl, preset, _strs(params), _strs(set), seed, full_data, no_recovery,
                         _split(workload), peer)


def crashtest(ftl: str, preset: str = "small", *, params: dict | None = None,
              set: dict | None = None, seed: int | None = None, seeds: int | None = None,
              jobs: int | None = None, crash_points: int = 1000, torn: bool = False,
              exhaustive: bool = False, promise: str | None = None, threads: int | None = None,
              fixed: bool = False, full_data: bool = False, second_lives: int = 0,
              cut_model: str | None = None, media: str | None = None,
              wear: float | None = None, power_off_days: float | None = None,
              client: Any = None, **workload: Any) -> dict:
    """``mobius crashtest --json``: one crash campaign, or a soak with ``seeds=N`` (or
    ``ftl="all"``). With a Dask ``client`` a soak runs one (design, seed) cell per task, and a
    single campaign splits its crash points into one share per worker; either report equals the
    one-process report (see :mod:`mobius.dask_sweep`). ``cut_model`` is the CLI's
    ``--cut-model`` (``"instant"``, the default, or ``"prefix"``); ``media``, ``wear`` and
    ``power_off_days`` its ``--media``, ``--wear`` and ``--power-off-days`` (docs/reliability.md)."""
    if client is not None and (cut_model, media, wear, power_off_days) != (None,) * 4:
        raise ConfigError("cut_model and the media options run without a Dask client")
    if client is not None and (seeds is not None or ftl == "all"):
        from .dask_sweep import crashtest_on
        return crashtest_on(client, ftl, preset=preset, params=params, set=set, seed=seed,
                            seeds=seeds, crash_points=crash_points, torn=torn,
                            promise=promise, fixed=fixed, full_data=full_data,
                            second_lives=second_lives, **workload)
    if client is not None:
        from .dask_sweep import campaign_on
        return campaign_on(client, ftl, preset=preset, params=params, set=set, seed=seed,
                           crash_points=crash_points, torn=torn, exhaustive=exhaustive,
                           promise=promise, threads=threads, full_data=full_data,
                           second_lives=second_lives, **workload)
    return _native.crashtest(ftl, preset, _strs(params), _strs(set), seed, seeds, jobs,
                             crash_points, torn, exhaustive, promise, threads, fixed, full_data,
                             second_lives, _split(workload), cut_model=cut_model, media=media,
                             wear=wear, power_off_days=power_off_days)


class Transaction:
    """A transaction being built on a :class:`Device`.

    Static (default): the pages are collected and :meth:`commit` sends them as one SWRITE;
    :meth:`abort` before commit sends nothing (the device never saw the transaction).
    Dynamic (``begin(dynamic=True)``): each page goes to the device as a DWRITE as soon as the
    next one is known (HEAD, BODY...), :meth:`commit` sends the last as REAR, and :meth:`abort`
    sends the device's ABORT.
    """

    def __init__(self, device: Device, dynamic: bool):
        self._dev = device
        self.dynamic = dynamic
        self._pages: list[tuple[int, bytes]] = []
        self._uuid = device._native.new_uuid() if dynamic else None
        self._sent = 0
        self.done = False

    def write(self, lpn: int, data: bytes) -> None:
        """Adds one page (``len(data) == page_bytes``) or a run of pages starting at ``lpn``."""
        if self.done:
            raise TransactionError("the transaction has already committed or aborted")
        pb = self._dev.page_bytes
        if not data or len(data) % pb:
            raise AddressError(f"data of {len(data)} bytes is not a whole number of {pb}-byte pages")
        for i in range(0, len(data), pb):
            self._pages.append((lpn + i // pb, bytes(data[i:i + pb])))
            if self.dynamic and len(self._pages) >= 2:
                self._send_dynamic(self._pages[-2], "head" if self._sent == 0 else "body")

    def _send_dynamic(self, page: tuple[int, bytes], flag: str) -> tuple[int, int | None]:
        self._sent += 1
        return self._dev._native.dwrite(self._uuid, page[0], page[1], flag)

    def commit(self, sync: bool = True) -> tuple[int, int]:
        """Commits: ``(ack_ns, durable_ns)``. ``sync=False`` is Möbius's asynchronous SWRITE
        (atomic at once, durable at ``durable_ns``)."""
        if self.done:
            raise TransactionError("the transaction has already committed or aborted")
        if not self._pages:
            raise AddressError("empty transaction: write at least one page")
        self.done = True
        if not self.dynamic:
            return self._dev._native.swrite(self._pages, sync)
        flag = "single" if self._sent == 0 else "rear"
        ack, durable = self._send_dynamic(self._pages[-1], flag)
        return ack, durable if durable is not None else ack

    def abort(self) -> int | None:
        """Aborts: the device's ABORT for a dynamic transaction already on the device; returns
        its acknowledgement instant (None when nothing had reached the device)."""
        if self.done:
            raise TransactionError("the transaction has already committed or aborted")
        self.done = True
        if self.dynamic and self._sent > 0:
            return self._dev._native.abort(self._uuid)
        return None

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class Device:
    """One design on an emulated flash device with full page data (see :func:`open`)."""

    def __init__(self, ftl: str = "mobius", preset: str = "small", image: str | None = None,
                 params: dict | None = None, set: dict | None = None, *,
                 media: str | None = None, wear: float | None = None,
                 power_off_days: float | None = None, media_seed: int = 1):
        self._native = _native.Device(ftl, preset, _strs(params), _strs(set),
                                      None if image is None else str(image), media, wear,
                                      power_off_days, media_seed)

    page_bytes = property(lambda self: self._native.page_bytes, doc="Bytes per logical page.")
    logical_pages = property(lambda self: self._native.logical_pages,
                             doc="Logical pages the host may address.")
    now_ns = property(lambda self: self._native.now_ns, doc="The host's simulated clock (ns).")
    design = property(lambda self: self._native.design)

    def write(self, lpn: int, data: bytes) -> int:
        """Writes whole pages at ``lpn``; returns the acknowledgement instant (ns)."""
        return self._native.write(lpn, bytes(data))

    def read(self, lpn: int, count: int = 1) -> bytes:
        return self._native.read(lpn, count)

    def sread(self, lpn: int, count: int = 1) -> bytes:
        """Serializable read (SREAD)."""
        return self._native.sread(lpn, count)

    def flush(self) -> int:
        return self._native.flush()

    def trim(self, lpn: int, count: int = 1) -> int:
        return self._native.trim(lpn, count)

    def begin(self, dynamic: bool = False) -> Transaction:
        """Starts a transaction (static SWRITE by default, DWRITE chain with ``dynamic=True``)."""
        if not self._native.transactional:
            raise ConfigError(f"{self.design} offers no transactions")
        return Transaction(self, dynamic)

    def capabilities(self) -> dict | None:
        return self._native.capabilities()

    def crash(self, at: int | None = None, torn: bool = True) -> int:
        """Power cut at simulated instant ``at`` (ns; default now): operations finished by then
        are kept, one running is torn, later ones never happened; then recovery. Returns ``at``."""
        return self._native.crash(at, torn)

    def idle(self, days: float) -> int:
        """Leaves the powered device idle for ``days`` of simulated time (with the media model
        on, every page ages); returns the host's clock."""
        return self._native.idle(days)

    def stats(self) -> dict:
        return self._native.stats()


def open(ftl: str = "mobius", preset: str = "small", image: str | None = None,
         params: dict | None = None, set: dict | None = None, *, media: str | None = None,
         wear: float | None = None, power_off_days: float | None = None,
         media_seed: int = 1) -> Device:  # noqa: A001
    """A design on a fresh in-memory device, or on an image file (created when missing,
    recovered when present). ``media`` (``"slc"``, ``"mlc"``, ``"tlc"``) switches the media
    model on as the CLI's ``--media``: blocks worn to ``wear`` times the part's rated cycles,
    ``power_off_days`` unpowered after each power cut, draws from ``media_seed``
    (docs/reliability.md); a page the media lost reads as :class:`MediaError`, never bytes."""
    return Device(ftl, preset, image, params, set, media=media, wear=wear,
                  power_off_days=power_off_days, media_seed=media_seed)


def results_frame(results: Iterable[dict]):
    """A pandas DataFrame of result dictionaries (nested keys flattened as ``a.b``)."""
    import pandas as pd
    return pd.json_normalize(list(results))


def plot(frame, x: str, y: str, by: str | None = None, *, ax: Any = None, logx: bool = False,
         logy: bool = False, title: str | None = None):
    """Draws ``y`` against ``x`` from a results frame (:func:`results_frame`,
    :func:`mobius.dask_sweep.load`) with matplotlib, one line per value of ``by`` (e.g. ``ftl``),
    points averaged over the rows that share ``x`` (e.g. seeds); returns the Axes. Non-numeric
    ``x`` values become categories."""
    import matplotlib.pyplot as plt
    if y not in frame.columns or x not in frame.columns or (by and by not in frame.columns):
        missing = [c for c in (x, y, by) if c and c not in frame.columns]
        raise ConfigError(f"no column {missing}; columns: {sorted(frame.columns)}")
    if ax is None:
        _, ax = plt.subplots()
    groups = frame.groupby(by, sort=True) if by else [(None, frame)]
    for name, g in groups:
        series = g.groupby(x, sort=True)[y].mean()
        ax.plot([str(v) if not isinstance(v, (int, float)) else v for v in series.index],
                series.values, marker="o", label=None if name is None else str(name))
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    if by:
        ax.legend(title=by)
    return ax


def sweep(grid: dict, client: Any = None, out: str | None = None, progress: bool = False):
    """Runs every cell of ``grid`` (see :mod:`mobius.dask_sweep`); returns a DataFrame."""
    from .dask_sweep import run_sweep
    return run_sweep(grid, client=client, out=out, progress=progress)


def report_frames(results: Any) -> dict:
    """The measured data of a ``mobius compare`` results.json as pandas DataFrames
    (see :mod:`mobius.figures`)."""
    from .figures import report_frames as frames
    return frames(results)


def report_figures(results: Any, out_dir: str, fmt: str = "png") -> list[str]:
    """The report's figures drawn with matplotlib from results.json into ``out_dir``."""
    from .figures import report_figures as figures
    return figures(results, out_dir, fmt)
