//! The checker proves both ways: DFTL keeps durable-writes through every crash image, and designs
//! that promise less are caught — DFTL with its OOB scan off (durable-writes), and a write-back
//! cache that acknowledges before programming (durable-writes).

use crashtest::{run_campaign, CampaignConfig};
use flash::{Content, DeviceConfig, Flash, Lpn, OpCause, ReadStatus};
use ftl::{
    BlockDevice, Completion, DesignOptions, DesignSpec, FtlError, PageOutcome, Promise,
    RecoveryReport,
};
use workload::WorkloadSpec;

fn long() -> bool {
    std::env::var("MOBIUS_LONG").is_ok()
}

fn config(design: DesignSpec, options: DesignOptions, points: usize, seed: u64) -> CampaignConfig {
    let mut workload = WorkloadSpec::named(design.default_workload).unwrap();
    workload.requests = 3000;
    workload.fill = 0.8;
    CampaignConfig {
        promise: design.promise,
        design,
        options,
        device: DeviceConfig::preset("small").unwrap(),
        workload,
        seed,
        crash_points: points,
        torn: true,
        exhaustive: false,
        threads: 2,
        tag_only: true,
    }
}

#[test]
fn dftl_keeps_durable_writes_through_every_crash_image() {
    let points = if long() { 10_000 } else { 1_000 };
    for seed in [1, 2] {
        let cfg = config(dftl::spec(), DesignOptions::default(), points, seed);
        let r = run_campaign(&cfg, &|_, _| {}).unwrap();
        assert_eq!(r.crash_points, points, "distinct crash instants");
        assert_eq!(r.recovered, r.crash_points);
        assert!(
            r.violations.is_empty(),
            "seed {seed}: {:#?}",
            &r.violations[..r.violations.len().min(3)]
        );
        assert!(r.points_by_kind.keys().any(|k| k.contains("torn")));
    }
}

#[test]
fn dftl_with_a_small_cmt_and_flushes_keeps_its_promise() {
    let mut cfg = config(
        dftl::spec(),
        DesignOptions::default()
            .with("cmt_entries", 64)
            .with("checkpoint_blocks", 8),
        if long() { 5_000 } else { 600 },
        3,
    );
    cfg.workload = WorkloadSpec::named("randwrite-flush").unwrap();
    cfg.workload.requests = 2500;
    cfg.workload.request_pages = 4;
    cfg.workload.fill = 0.85;
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert!(
        r.violations.is_empty(),
        "{:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
}

#[test]
fn dftl_exhaustive_small_run() {
    let mut cfg = config(dftl::spec(), DesignOptions::default(), 0, 4);
    cfg.exhaustive = true;
    cfg.workload.requests = if long() { 2000 } else { 300 };
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert!(r.crash_points > 500);
    assert!(
        r.violations.is_empty(),
        "{:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
}

#[test]
fn dftl_without_its_oob_scan_is_caught() {
    let cfg = config(
        dftl::spec(),
        DesignOptions::default().with("oob_scan", "off"),
        300,
        1,
    );
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert!(
        !r.violations.is_empty(),
        "the checker must catch a DFTL that forgets post-checkpoint writes"
    );
    let v = &r.violations[0];
    assert!(
        v.replay.contains("--param oob_scan=off") && v.replay.contains("--replay-instant"),
        "{}",
        v.replay
    );
    assert!(v.what.contains("must have survived"), "{}", v.what);
    // The replay rebuilds exactly that image and finds the same violation.
    let again = crashtest::replay_one(
        &cfg,
        crashtest::prefix::CutModel::Instant,
        v.instant_ns,
        v.torn,
    )
    .unwrap();
    assert!(again.iter().any(|x| x.what == v.what && x.lpn == v.lpn));
}

#[test]
fn same_seed_same_report_whatever_the_thread_count() {
    let mut cfg = config(dftl::spec(), DesignOptions::default(), 200, 9);
    let a = run_campaign(&cfg, &|_, _| {}).unwrap();
    let b = run_campaign(&cfg, &|_, _| {}).unwrap();
    cfg.threads = 1;
    let c = run_campaign(&cfg, &|_, _| {}).unwrap();
    let strip = |r: &crashtest::CampaignReport| {
        let mut j = r.to_json();
        j.as_object_mut().unwrap().remove("wall_s");
        j.as_object_mut().unwrap().remove("crash_points_per_s");
        j.as_object_mut().unwrap().remove("speed");
        j
    };
    assert_eq!(strip(&a), strip(&b));
    assert_eq!(strip(&a), strip(&c));
    let json = a.to_json();
    for key in ["ftl", "crash_points", "violations", "recovered"] {
        assert!(json.get(key).is_some(), "JSON key {key}");
    }
    assert_eq!(json["violations"], 0);
}

#[test]
fn full_data_pages_are_decoded_and_judged() {
    let mut cfg = config(dftl::spec(), DesignOptions::default(), 150, 6);
    cfg.tag_only = false;
    cfg.workload.requests = 800;
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert_eq!(r.recovered, r.crash_points);
    assert!(
        r.violations.is_empty(),
        "{:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
    let mut bad = cfg.clone();
    bad.options = DesignOptions::default().with("oob_scan", "off");
    let r = run_campaign(&bad, &|_, _| {}).unwrap();
    assert!(!r.violations.is_empty());
    assert!(r.violations[0].replay.contains("--full-data"));
}

/// A test-only write-back cache: acknowledges a write at once and programs it only on flush or
/// when its small cache is full. It promises flush-only; under durable-writes it must be caught.
struct LazyCache {
    flash: Flash,
    map: Vec<Option<flash::Ppn>>,
    cache: Vec<(Lpn, Content)>,
    next: u32,
}

impl LazyCache {
    /// Writes the cache back newest first (like a cache that evicts in any order), keeping only
    /// the last version of each page: flush-only holds, arrival order does not.
    fn drain(&mut self, now: u64) -> Result<u64, FtlError> {
        let mut end = now;
        let mut latest: Vec<(Lpn, Content)> = Vec::new();
        for (lpn, c) in std::mem::take(&mut self.cache).into_iter().rev() {
            if !latest.iter().any(|(l, _)| *l == lpn) {
                latest.push((lpn, c));
            }
        }
        for (lpn, c) in latest {
            let ppn = flash::Ppn(self.next);
            self.next += 1;
            end = end.max(
                self.flash
                    .program(ppn, &c, &lpn.0.to_le_bytes(), now, OpCause::HostData)?
                    .end_ns,
            );
            self.map[lpn.0 as usize] = Some(ppn);
        }
        Ok(end)
    }
}

impl BlockDevice for LazyCache {
    fn design(&self) -> &'static str {
        "lazy-cache"
    }
    fn promise(&self) -> Promise {
        Promise::FlushOnly
    }
    fn logical_pages(&self) -> u32 {
        512
    }
    fn write(
        &mut self,
        start: Lpn,
        pages: &[Content],
        arrival_ns: u64,
    ) -> Result<Completion, FtlError> {
        ftl::check_range(start, pages.len() as u64, 512)?;
        for (i, c) in pages.iter().enumerate() {
            self.cache.push((Lpn(start.0 + i as u32), c.clone()));
        }
        if self.cache.len() > 16 {
            self.drain(arrival_ns)?;
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns + 1000,
        })
    }
    fn read(
        &mut self,
        start: Lpn,
        count: u32,
        arrival_ns: u64,
        out: &mut Vec<PageOutcome>,
    ) -> Result<Completion, FtlError> {
        out.clear();
        let mut oob = [0u8; 4];
        for i in 0..count {
            let lpn = Lpn(start.0 + i);
            if let Some((_, c)) = self.cache.iter().rev().find(|(l, _)| *l == lpn) {
                out.push(PageOutcome::Data(c.clone()));
                continue;
            }
            out.push(match self.map[lpn.0 as usize] {
                None => PageOutcome::Unwritten,
                Some(p) => match self
                    .flash
                    .read(p, &mut oob, arrival_ns, OpCause::HostData)?
                    .0
                {
                    ReadStatus::Data(c) => PageOutcome::Data(c),
                    _ => PageOutcome::Uncorrectable,
                },
            });
        }
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns,
        })
    }
    fn flush(&mut self, arrival_ns: u64) -> Result<Completion, FtlError> {
        let end = self.drain(arrival_ns)?;
        Ok(Completion {
            arrival_ns,
            ack_ns: end,
        })
    }
    fn trim(&mut self, _: Lpn, _: u32, arrival_ns: u64) -> Result<Completion, FtlError> {
        Ok(Completion {
            arrival_ns,
            ack_ns: arrival_ns,
        })
    }
    fn flash(&self) -> &Flash {
        &self.flash
    }
    fn flash_mut(&mut self) -> &mut Flash {
        &mut self.flash
    }
    fn into_flash(self: Box<Self>) -> Flash {
        self.flash
    }
}

fn lazy_format(flash: Flash, _: &DesignOptions) -> Result<Box<dyn BlockDevice>, FtlError> {
    Ok(Box::new(LazyCache {
        flash,
        map: vec![None; 512],
        cache: Vec::new(),
        next: 0,
    }))
}

/// Recovery by scanning every programmed page's OOB in program order (log-structured, never erased).
fn lazy_recover(
    mut flash: Flash,
    _: &DesignOptions,
) -> Result<(Box<dyn BlockDevice>, RecoveryReport), FtlError> {
    let before = flash.stats().clone();
    let start = flash.idle_ns();
    let mut map = vec![None; 512];
    let mut next = 0;
    let mut oob = [0u8; 4];
    for p in 0..flash.geometry().pages() {
        let (state, _) = flash.read_oob(flash::Ppn(p), &mut oob, start, OpCause::Recovery)?;
        if state != flash::PageState::Programmed {
            if state == flash::PageState::Torn {
                next = p + 1;
            }
            break;
        }
        map[u32::from_le_bytes(oob) as usize] = Some(flash::Ppn(p));
        next = p + 1;
    }
    let report = RecoveryReport::measure(&flash, &before, start);
    Ok((
        Box::new(LazyCache {
            flash,
            map,
            cache: Vec::new(),
            next,
        }),
        report,
    ))
}

fn lazy_spec() -> DesignSpec {
    DesignSpec {
        name: "lazy-cache",
        summary: "test-only write-back cache",
        promise: Promise::FlushOnly,
        oob_record_bytes: |_| 4,
        format_version: 1,
        format: lazy_format,
        recover: lazy_recover,
        default_workload: "randwrite-flush",
        soak_params: &[],
        // Its capacity ignores over-provisioning: a soak that turns the device's down changes
        // nothing here.
        over_provisioning: ftl::OverProvisioningKnob::Device,
    }
}

fn lazy_config(promise: Promise) -> CampaignConfig {
    let mut cfg = config(lazy_spec(), DesignOptions::default(), 400, 5);
    cfg.workload.requests = 600;
    cfg.workload.fill = 0.0;
    cfg.workload.flush_every = 40;
    cfg.promise = promise;
    cfg
}

#[test]
fn a_write_back_cache_keeps_flush_only() {
    let r = run_campaign(&lazy_config(Promise::FlushOnly), &|_, _| {}).unwrap();
    assert!(
        r.violations.is_empty(),
        "{:#?}",
        &r.violations[..r.violations.len().min(3)]
    );
}

#[test]
fn a_write_back_cache_is_caught_under_durable_writes_and_ordered() {
    for promise in [Promise::DurableWrites, Promise::Ordered] {
        let r = run_campaign(&lazy_config(promise), &|_, _| {}).unwrap();
        assert!(
            !r.violations.is_empty(),
            "{promise:?}: acknowledging before programming must be caught"
        );
    }
}

/// The OPTR paper's baseline: the write-cached FTL keeps flush-only but breaks prefix semantics.
#[test]
fn the_write_cached_baseline_is_caught_under_ordered() {
    let mut cfg = config(wcache::spec(), DesignOptions::default(), 300, 2);
    let own = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert!(
        own.violations.is_empty(),
        "wcache keeps flush-only: {:#?}",
        &own.violations[..own.violations.len().min(3)]
    );
    cfg.promise = Promise::Ordered;
    let r = run_campaign(&cfg, &|_, _| {}).unwrap();
    assert!(
        !r.violations.is_empty(),
        "wcache must be caught violating prefix semantics"
    );
}
