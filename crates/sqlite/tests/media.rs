//! SQLite on worn media (issue #69, docs/reliability.md): a page the ECC cannot correct reaches
//! SQLite as an I/O error (SQLITE_IOERR), never as bytes — neither the lost page's nor an older
//! version's. The database is written on a device with the media model on, its every programmed
//! page is then lost to the media (data unreadable, spare area readable: `Fault::Read`), and the
//! table is read back.

mod common;

use flash::{DeviceConfig, Fault, PageState, Ppn};
use ftl::{BlockDevice, DesignOptions};
use sqlite::{Database, Mode, OpenOptions, SqlError};

/// The small preset with 128 blocks per chip and the MLC error model on (bit errors only: no
/// factory or grown bad blocks, so the only loss is the one the test injects).
fn media_config() -> DeviceConfig {
    let mut c = DeviceConfig::small_with_bit_errors_only();
    c.geometry.blocks_per_chip = 128;
    c
}

fn device(design: &str) -> Box<dyn BlockDevice> {
    lab::device::fresh(
        &common::spec(design),
        &media_config(),
        &DesignOptions::default(),
        false,
    )
    .expect("format")
}

/// Every programmed page of the device fails ECC from now on.
fn lose_every_page(db: &Database) -> usize {
    db.with_store_mut(|s| {
        let flash = s.device_mut().flash_mut();
        let lost: Vec<Ppn> = (0..flash.geometry().pages())
            .map(Ppn)
            .filter(|&p| flash.peek_state(p) == PageState::Programmed)
            .collect();
        for &p in &lost {
            flash.inject(Fault::Read(p));
        }
        lost.len()
    })
}

/// Whether `e` is SQLite's I/O error (any extended SQLITE_IOERR code).
fn is_sqlite_io_error(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure)
}

/// The whole table, as one string.
fn table(db: &Database) -> Result<String, rusqlite::Error> {
    db.conn().query_row(
        "SELECT count(*) || ':' || group_concat(k || '=' || hex(v), ',') FROM kv",
        [],
        |r| r.get(0),
    )
}

/// Designs that keep written pages in a DRAM cache of their own and may serve a read from it:
/// the write-cached FTL and OPTR (its write cache, OPTR §6.1).
const CACHING: [&str; 2] = ["wcache", "optr"];

/// Writes 200 rows, closes, reopens, loses every page, then reads the table: whether it reads
/// back as written, or SQLite's error.
fn read_after_loss(design: &str, mode: Mode) -> Result<bool, rusqlite::Error> {
    let mut opts = OpenOptions::new(mode);
    opts.synchronous = "EXTRA".into();
    let db = Database::create(device(design), &opts).unwrap();
    db.conn()
        .execute_batch("CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    for k in 0..200u32 {
        db.conn()
            .execute("INSERT INTO kv VALUES (?1, randomblob(300))", [k])
            .unwrap();
    }
    let written = table(&db).unwrap();
    let dev = db.close().unwrap();
    // Reopened: SQLite's page cache is empty, the directory and the schema are read at open.
    let db = Database::open(dev, &opts).unwrap();
    assert!(lose_every_page(&db) > 0);
    table(&db).map(|back| back == written)
}

#[test]
fn a_lost_page_is_an_sqlite_io_error_never_rows() {
    for (design, mode) in [
        ("mobius", Mode::Batch),
        ("atomic-write", Mode::Batch),
        ("txflash-bpcc", Mode::Batch),
        ("dftl", Mode::Journal),
        ("fast", Mode::Journal),
    ] {
        match read_after_loss(design, mode) {
            Err(e) => assert!(is_sqlite_io_error(&e), "{design}: not an I/O error: {e}"),
            Ok(same) => panic!("{design}: rows read back from lost pages (as written: {same})"),
        }
    }
}

/// The same loss on a design with a DRAM cache of written pages: the rows may come from that
/// cache (the design's own copy: then exactly as written), or a read reaches the flash and is
/// an I/O error; never other rows.
#[test]
fn a_write_cache_serves_its_own_copy_or_an_io_error() {
    for design in CACHING {
        match read_after_loss(design, Mode::Journal) {
            Err(e) => assert!(is_sqlite_io_error(&e), "{design}: not an I/O error: {e}"),
            Ok(same) => assert!(same, "{design}: rows other than the written ones"),
        }
    }
}

/// The oracle above can fail: without the loss, the same read returns the rows.
#[test]
fn without_the_loss_the_rows_read_back() {
    let mut opts = OpenOptions::new(Mode::Batch);
    opts.synchronous = "EXTRA".into();
    let db = Database::create(device("mobius"), &opts).unwrap();
    db.conn()
        .execute_batch("CREATE TABLE kv(k INTEGER PRIMARY KEY, v BLOB)")
        .unwrap();
    db.conn()
        .execute("INSERT INTO kv VALUES (1, randomblob(300))", [])
        .unwrap();
    let db = Database::open(db.close().unwrap(), &opts).unwrap();
    let n: u32 = db
        .conn()
        .query_row("SELECT count(*) FROM kv", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);
    let _: Result<_, SqlError> = db.close();
}
