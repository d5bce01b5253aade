//! Every mode on every design it applies to: a database is created, written, closed, and read
//! back — after a clean close and after a power cut with the design's recovery.

mod common;

use sqlite::{Database, Mode, OpenOptions, SqlError, TxKind};

const TX_DESIGNS: [&str; 6] = [
    "mobius",
    "atomic-write",
    "lighttx",
    "txflash-tc",
    "txflash-scc",
    "txflash-bpcc",
];

fn fill(db: &Database, rows: u32) {
    let conn = db.conn();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS kv(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    for k in 0..rows {
        conn.execute("INSERT INTO kv VALUES (?1, zeroblob(300))", [k])
            .unwrap();
    }
}

/// Rows in `kv`; 0 when even the table's creation did not survive.
fn count(db: &Database) -> u32 {
    db.conn()
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .unwrap_or(0)
}

fn integrity(db: &Database) -> String {
    db.conn()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// One commit of 1,500 rows of 3,000 bytes (~1,500 pages, more than any design keeps atomic on
/// the test device); the store's counters before and after it.
fn commit_1500_rows(db: &Database) -> (sqlite::StoreStats, sqlite::StoreStats) {
    let before = db.stats();
    db.conn()
        .execute_batch(
            "BEGIN; WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < 1500)
             INSERT INTO kv SELECT x + 1000, zeroblob(3000) FROM s; COMMIT;",
        )
        .unwrap();
    (before, db.stats())
}

fn round_trip(design: &str, opts: &OpenOptions) {
    let mut opts = opts.clone();
    if matches!(opts.mode, Mode::Journal | Mode::Ordered | Mode::NoBarrier) {
        // With FULL, SQLite does not sync the journal's deletion: a cut right after a commit
        // may roll it back. EXTRA makes the commit durable.
        opts.synchronous = "EXTRA".into();
    }
    let opts = &opts;
    let db = Database::create(common::device(design), opts).unwrap();
    fill(&db, 200);
    let stats = db.stats();
    let dev = db.close().unwrap();
    // A clean close, then a power cut: every commit returned with synchronous=FULL survives.
    let dev = common::recover(design, dev);
    let db = Database::open(dev, opts).unwrap();
    assert_eq!(integrity(&db), "ok");
    if opts.mode == Mode::NoBarrier {
        // Durability is eventual: a prefix of the commits survives.
        assert!(count(&db) <= 200);
        return;
    }
    assert_eq!(count(&db), 200, "{design} {:?}", opts.mode);
    match opts.mode {
        Mode::Batch => {
            // The first commits (CREATE TABLE on an empty file) go through the journal: SQLite
            // uses batch writes only on a non-empty database.
            assert!(
                stats.tx_committed >= 199,
                "{design}: one device transaction per commit ({})",
                stats.tx_committed
            );
            assert_eq!(stats.journal_fallbacks, 0);
            // Formatting and the journaled first commits flush; batch commits do not.
            assert!(
                stats.flushes <= 6,
                "{design}: batch commits need no flush ({})",
                stats.flushes
            );
        }
        Mode::Journal | Mode::Wal => assert!(stats.flushes >= 200, "{design}: {}", stats.flushes),
        _ => {}
    }
}

#[test]
fn batch_mode_commits_through_device_transactions_on_every_transactional_design() {
    for d in TX_DESIGNS {
        round_trip(d, &OpenOptions::new(Mode::Batch));
    }
}

#[test]
fn dynamic_batches_use_dwrite_chains_on_mobius() {
    let mut opts = OpenOptions::new(Mode::Batch);
    opts.tx_kind = TxKind::Dynamic;
    round_trip("mobius", &opts);
}

#[test]
fn journal_and_wal_run_on_every_design() {
    for d in common::designs() {
        round_trip(d.name, &OpenOptions::new(Mode::Journal));
        round_trip(d.name, &OpenOptions::new(Mode::Wal));
    }
}

#[test]
fn ordered_modes_run_on_optr() {
    round_trip("optr", &OpenOptions::new(Mode::Ordered));
    round_trip("optr", &OpenOptions::new(Mode::NoBarrier));
}

#[test]
fn a_mode_the_design_lacks_is_a_clear_error() {
    for (design, mode) in [
        ("dftl", Mode::Batch),
        ("wcache", Mode::Batch),
        ("mobius", Mode::Ordered),
    ] {
        match Database::create(common::device(design), &OpenOptions::new(mode)) {
            Err(SqlError::ModeUnsupported { .. }) => {}
            Err(e) => panic!("{design} {mode:?}: wrong error {e}"),
            Ok(_) => panic!("{design} {mode:?}: accepted"),
        }
    }
    assert!(matches!(Mode::parse("fast"), Err(SqlError::UnknownMode(_))));
}

#[test]
fn an_unformatted_or_foreign_device_is_refused() {
    assert!(matches!(
        Database::open(common::device("mobius"), &OpenOptions::new(Mode::Journal)),
        Err(SqlError::NotFormatted)
    ));
    let mut dev = common::device("dftl");
    let junk = flash::Content::Bytes(vec![0xAB; 4096].into_boxed_slice());
    dev.write(flash::Lpn(0), &[junk], 0).unwrap();
    assert!(matches!(
        Database::open(dev, &OpenOptions::new(Mode::Journal)),
        Err(SqlError::Foreign(_))
    ));
}

#[test]
fn a_commit_too_large_for_the_design_falls_back_to_the_journal() {
    // Atomic-Write keeps at most 1/16 of the device (at most 1,024 pages) atomic; this commit
    // dirties ~1,500.
    let opts = OpenOptions::new(Mode::Batch);
    let db = Database::create(common::device("atomic-write"), &opts).unwrap();
    fill(&db, 10);
    let (before, after) = commit_1500_rows(&db);
    assert_eq!(after.journal_fallbacks, before.journal_fallbacks + 1);
    assert!(
        after.flushes > before.flushes,
        "the journaled commit flushes"
    );
    db.conn()
        .execute("INSERT INTO kv VALUES (5000, zeroblob(10))", [])
        .unwrap();
    assert_eq!(
        db.stats().tx_committed,
        after.tx_committed + 1,
        "small commits are batched again"
    );
    let dev = common::recover("atomic-write", db.cut_power());
    let db = Database::open(dev, &opts).unwrap();
    assert_eq!(count(&db), 1511);
    assert_eq!(integrity(&db), "ok");
}

#[test]
fn a_rolled_back_dynamic_batch_is_aborted_on_the_device() {
    let mut opts = OpenOptions::new(Mode::Batch);
    opts.tx_kind = TxKind::Dynamic;
    let db = Database::create(common::device("mobius"), &opts).unwrap();
    fill(&db, 10);
    // A constraint failure after SQLite has written pages would roll back in SQLite itself;
    // the VFS-level rollback is exercised directly on the store.
    let dev = db.close().unwrap();
    let mut store = sqlite::Store::open(dev, Mode::Batch, TxKind::Dynamic).unwrap();
    store.begin_atomic().unwrap();
    for p in 0..3u64 {
        store
            .write(sqlite::FileKind::Db, p * 4096, &[0xEE; 4096])
            .unwrap();
    }
    store.rollback_atomic().unwrap();
    assert_eq!(store.stats().aborts, 1);
    assert_eq!(
        store.stats().dwrites,
        2,
        "two pages went out, the third was held back"
    );
    let dev = common::recover("mobius", store.into_device());
    let db = Database::open(dev, &opts).unwrap();
    assert_eq!(count(&db), 10);
    assert_eq!(integrity(&db), "ok");
}

/// After a power cut nothing reaches the device: dropping the connection makes SQLite
/// checkpoint its WAL and delete it, and before the fix the store sent that checkpoint (read
/// from a WAL whose buffered frames the cut had just lost) and the deletion to the device. The
/// crash campaigns judged those images: WAL with `synchronous=NORMAL` on every design found a
/// database file whose first page was a leaf ("file is not a database").
#[test]
fn nothing_reaches_the_device_after_a_power_cut() {
    let mut opts = OpenOptions::new(Mode::Wal);
    opts.synchronous = "NORMAL".into();
    let db = Database::create(common::device("dftl"), &opts).unwrap();
    fill(&db, 200);
    let before = db.with_store_mut(|s| s.device().flash().stats().clone());
    let dev = db.cut_power();
    let after = dev.flash().stats().since(&before);
    assert_eq!(
        (
            after.total_programs(),
            after.total_reads(),
            after.total_erases()
        ),
        (0, 0, 0),
        "flash operations after the cut"
    );
}

/// `synchronous=NORMAL` in batch mode sends an asynchronous SWRITE only to a design that offers
/// one. TxFlash refuses it; before the fix every NORMAL commit on TxFlash fell back to SQLite's
/// journal (at NORMAL), which the SQLite soak caught corrupting the database after cuts.
#[test]
fn batch_normal_commits_through_transactions_on_designs_without_async_swrite() {
    for design in ["txflash-scc", "atomic-write", "mobius"] {
        let mut opts = OpenOptions::new(Mode::Batch);
        opts.synchronous = "NORMAL".into();
        let db = Database::create(common::device(design), &opts).unwrap();
        fill(&db, 60);
        let stats = db.with_store_mut(|s| s.stats().clone());
        assert_eq!(stats.journal_fallbacks, 0, "{design}: {stats:?}");
        assert!(stats.tx_committed >= 50, "{design}: {stats:?}");
        assert_eq!(count(&db), 60);
    }
}

/// A dynamic batch the design refuses a page of (over its longest transaction) is rolled back
/// and committed through SQLite's journal on every design with dynamic transactions: counted
/// as a journal fallback, with no transaction left running on the device (the next commit is
/// a batch again), and every row there after a power cut. Möbius and Atomic-Write keep the
/// transaction running until the VFS aborts it; LightTx and TxFlash abort it when they refuse
/// the page, so the VFS's ABORT finds none and that is no error.
#[test]
fn a_dynamic_batch_too_large_for_the_design_falls_back_to_the_journal() {
    for design in TX_DESIGNS {
        let mut opts = OpenOptions::new(Mode::Batch);
        opts.tx_kind = TxKind::Dynamic;
        let db = Database::create(common::device(design), &opts).unwrap();
        fill(&db, 10);
        let (before, after) = commit_1500_rows(&db);
        assert_eq!(
            after.journal_fallbacks,
            before.journal_fallbacks + 1,
            "{design}"
        );
        assert_eq!(
            after.batch_rollbacks,
            before.batch_rollbacks + 1,
            "{design}"
        );
        let device_keeps_it = matches!(design, "mobius" | "atomic-write");
        assert_eq!(
            after.aborts,
            before.aborts + u64::from(device_keeps_it),
            "{design}"
        );
        db.conn()
            .execute("INSERT INTO kv VALUES (5000, zeroblob(10))", [])
            .unwrap();
        assert_eq!(db.stats().tx_committed, after.tx_committed + 1, "{design}");
        let dev = common::recover(design, db.cut_power());
        let db = Database::open(dev, &opts).unwrap();
        assert_eq!(count(&db), 1511, "{design}");
        assert_eq!(integrity(&db), "ok", "{design}");
    }
}
