//! A TPC-C-like workload on SQLite (the Möbius paper ran DBT-2, §V): the five transactions
//! in the standard mix — new-order 45 %, payment 43 %, order-status 4 %, delivery 4 %,
//! stock-level 4 % — on the TPC-C schema at a small scale (per warehouse: 10 districts, 300
//! customers per district and 10,000 items instead of 3,000 and 100,000; no think times, one
//! terminal). Each writing transaction also inserts its sequence number into `tpcc_commits`,
//! so a crash check can count the transactions that survived and see that they form a prefix.
//!
//! Consistency conditions checked after a cut (TPC-C §3.3.2): 1. `W_YTD = Σ D_YTD`;
//! 2. `D_NEXT_O_ID − 1 = max(O_ID)`; 4. `Σ O_OL_CNT = count(order lines)` per district; and the
//! warehouse's year-to-date equals its initial value plus the payments in `history`.

use crate::error::{Breach, SqlError};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rusqlite::{params, Connection};

pub const DISTRICTS: u32 = 10;
pub const CUSTOMERS: u32 = 300;
pub const ITEMS: u32 = 10_000;
/// 300,000.00 in cents (TPC-C's initial year-to-date balance).
const INITIAL_YTD: i64 = 30_000_000;

pub fn setup(conn: &Connection, warehouses: u32) -> Result<(), SqlError> {
    conn.execute_batch(
        "CREATE TABLE warehouse(w_id INTEGER PRIMARY KEY, w_ytd INTEGER NOT NULL, w_tax INTEGER NOT NULL);
         CREATE TABLE district(d_w_id INTEGER, d_id INTEGER, d_ytd INTEGER NOT NULL, d_tax INTEGER NOT NULL,
             d_next_o_id INTEGER NOT NULL, PRIMARY KEY (d_w_id, d_id));
         CREATE TABLE customer(c_w_id INTEGER, c_d_id INTEGER, c_id INTEGER, c_balance INTEGER NOT NULL,
             c_ytd_payment INTEGER NOT NULL, c_payment_cnt INTEGER NOT NULL, c_delivery_cnt INTEGER NOT NULL,
             c_data TEXT, PRIMARY KEY (c_w_id, c_d_id, c_id));
         CREATE TABLE item(i_id INTEGER PRIMARY KEY, i_price INTEGER NOT NULL, i_data TEXT);
         CREATE TABLE stock(s_w_id INTEGER, s_i_id INTEGER, s_quantity INTEGER NOT NULL, s_ytd INTEGER NOT NULL,
             s_order_cnt INTEGER NOT NULL, s_data TEXT, PRIMARY KEY (s_w_id, s_i_id));
         CREATE TABLE orders(o_w_id INTEGER, o_d_id INTEGER, o_id INTEGER, o_c_id INTEGER NOT NULL,
             o_carrier_id INTEGER, o_ol_cnt INTEGER NOT NULL, PRIMARY KEY (o_w_id, o_d_id, o_id));
         CREATE TABLE new_order(no_w_id INTEGER, no_d_id INTEGER, no_o_id INTEGER, PRIMARY KEY (no_w_id, no_d_id, no_o_id));
         CREATE TABLE order_line(ol_w_id INTEGER, ol_d_id INTEGER, ol_o_id INTEGER, ol_number INTEGER,
             ol_i_id INTEGER NOT NULL, ol_quantity INTEGER NOT NULL, ol_amount INTEGER NOT NULL, ol_delivered INTEGER,
             PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number));
         CREATE TABLE history(h_c_id INTEGER, h_d_id INTEGER, h_w_id INTEGER, h_amount INTEGER NOT NULL);
         CREATE TABLE tpcc_commits(n INTEGER PRIMARY KEY);",
    )?;
    conn.execute_batch("BEGIN")?;
    let filler = "x".repeat(50);
    for i in 1..=ITEMS {
        conn.execute(
            "INSERT INTO item VALUES (?1, ?2, ?3)",
            params![i, 100 + (i * 37) % 9900, filler],
        )?;
    }
    for w in 1..=warehouses {
        conn.execute(
            "INSERT INTO warehouse VALUES (?1, ?2, ?3)",
            params![w, INITIAL_YTD, w % 20],
        )?;
        for i in 1..=ITEMS {
            conn.execute(
                "INSERT INTO stock VALUES (?1, ?2, 50, 0, 0, ?3)",
                params![w, i, filler],
            )?;
        }
        for d in 1..=DISTRICTS {
            conn.execute(
                "INSERT INTO district VALUES (?1, ?2, ?3, ?4, 1)",
                params![w, d, INITIAL_YTD / DISTRICTS as i64, d % 20],
            )?;
            for c in 1..=CUSTOMERS {
                conn.execute(
                    "INSERT INTO customer VALUES (?1, ?2, ?3, -1000, 1000, 1, 0, ?4)",
                    params![w, d, c, filler],
                )?;
            }
        }
    }
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// One transaction of the mix; `seq` numbers the writing ones. Returns whether it wrote.
pub fn transaction(
    conn: &Connection,
    warehouses: u32,
    seq: u64,
    rng: &mut ChaCha8Rng,
) -> Result<bool, SqlError> {
    let w = rng.random_range(1..=warehouses);
    let d = rng.random_range(1..=DISTRICTS);
    let roll = rng.random_range(0..100);
    conn.execute_batch("BEGIN")?;
    let wrote = match roll {
        0..45 => new_order(conn, w, d, rng)?,
        45..88 => payment(conn, w, d, rng)?,
        88..92 => order_status(conn, w, d, rng)?,
        92..96 => delivery(conn, w, rng)?,
        _ => stock_level(conn, w, d)?,
    };
    if wrote {
        conn.prepare_cached("INSERT INTO tpcc_commits VALUES (?1)")?
            .execute([seq])?;
    }
    conn.execute_batch("COMMIT")?;
    Ok(wrote)
}

fn new_order(conn: &Connection, w: u32, d: u32, rng: &mut ChaCha8Rng) -> Result<bool, SqlError> {
    let c = rng.random_range(1..=CUSTOMERS);
    let o_id: i64 = conn
        .prepare_cached("SELECT d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
        .query_row(params![w, d], |r| r.get(0))?;
    conn.prepare_cached(
        "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = ?1 AND d_id = ?2",
    )?
    .execute(params![w, d])?;
    let lines = rng.random_range(5..=15u32);
    conn.prepare_cached("INSERT INTO orders VALUES (?1, ?2, ?3, ?4, NULL, ?5)")?
        .execute(params![w, d, o_id, c, lines])?;
    conn.prepare_cached("INSERT INTO new_order VALUES (?1, ?2, ?3)")?
        .execute(params![w, d, o_id])?;
    for n in 1..=lines {
        let i = rng.random_range(1..=ITEMS);
        let qty = rng.random_range(1..=10i64);
        let price: i64 = conn
            .prepare_cached("SELECT i_price FROM item WHERE i_id = ?1")?
            .query_row([i], |r| r.get(0))?;
        conn.prepare_cached(
            "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= ?1 + 10 THEN s_quantity - ?1 ELSE s_quantity - ?1 + 91 END,
             s_ytd = s_ytd + ?1, s_order_cnt = s_order_cnt + 1 WHERE s_w_id = ?2 AND s_i_id = ?3",
        )?
        .execute(params![qty, w, i])?;
        conn.prepare_cached("INSERT INTO order_line VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL)")?
            .execute(params![w, d, o_id, n, i, qty, qty * price])?;
    }
    Ok(true)
}

fn payment(conn: &Connection, w: u32, d: u32, rng: &mut ChaCha8Rng) -> Result<bool, SqlError> {
    let c = rng.random_range(1..=CUSTOMERS);
    let amount = rng.random_range(100..=500_000i64);
    conn.prepare_cached("UPDATE warehouse SET w_ytd = w_ytd + ?1 WHERE w_id = ?2")?
        .execute(params![amount, w])?;
    conn.prepare_cached("UPDATE district SET d_ytd = d_ytd + ?1 WHERE d_w_id = ?2 AND d_id = ?3")?
        .execute(params![amount, w, d])?;
    conn.prepare_cached(
        "UPDATE customer SET c_balance = c_balance - ?1, c_ytd_payment = c_ytd_payment + ?1,
         c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = ?2 AND c_d_id = ?3 AND c_id = ?4",
    )?
    .execute(params![amount, w, d, c])?;
    conn.prepare_cached("INSERT INTO history VALUES (?1, ?2, ?3, ?4)")?
        .execute(params![c, d, w, amount])?;
    Ok(true)
}

fn order_status(conn: &Connection, w: u32, d: u32, rng: &mut ChaCha8Rng) -> Result<bool, SqlError> {
    let c = rng.random_range(1..=CUSTOMERS);
    let _: i64 = conn
        .prepare_cached(
            "SELECT c_balance FROM customer WHERE c_w_id = ?1 AND c_d_id = ?2 AND c_id = ?3",
        )?
        .query_row(params![w, d, c], |r| r.get(0))?;
    let last: Option<i64> = conn
        .prepare_cached(
            "SELECT max(o_id) FROM orders WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_c_id = ?3",
        )?
        .query_row(params![w, d, c], |r| r.get(0))?;
    if let Some(o) = last {
        let mut stmt = conn.prepare_cached(
            "SELECT ol_i_id, ol_quantity, ol_amount FROM order_line WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3",
        )?;
        let rows = stmt.query_map(params![w, d, o], |r| r.get::<_, i64>(2))?;
        for r in rows {
            r?;
        }
    }
    Ok(false)
}

fn delivery(conn: &Connection, w: u32, rng: &mut ChaCha8Rng) -> Result<bool, SqlError> {
    let carrier = rng.random_range(1..=10);
    for d in 1..=DISTRICTS {
        let oldest: Option<i64> = conn
            .prepare_cached(
                "SELECT min(no_o_id) FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2",
            )?
            .query_row(params![w, d], |r| r.get(0))?;
        let Some(o) = oldest else { continue };
        conn.prepare_cached(
            "DELETE FROM new_order WHERE no_w_id = ?1 AND no_d_id = ?2 AND no_o_id = ?3",
        )?
        .execute(params![w, d, o])?;
        let c: i64 = conn
            .prepare_cached(
                "SELECT o_c_id FROM orders WHERE o_w_id = ?1 AND o_d_id = ?2 AND o_id = ?3",
            )?
            .query_row(params![w, d, o], |r| r.get(0))?;
        conn.prepare_cached(
            "UPDATE orders SET o_carrier_id = ?1 WHERE o_w_id = ?2 AND o_d_id = ?3 AND o_id = ?4",
        )?
        .execute(params![carrier, w, d, o])?;
        conn.prepare_cached("UPDATE order_line SET ol_delivered = 1 WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3")?
            .execute(params![w, d, o])?;
        let total: i64 = conn
            .prepare_cached("SELECT sum(ol_amount) FROM order_line WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id = ?3")?
            .query_row(params![w, d, o], |r| r.get(0))?;
        conn.prepare_cached(
            "UPDATE customer SET c_balance = c_balance + ?1, c_delivery_cnt = c_delivery_cnt + 1
             WHERE c_w_id = ?2 AND c_d_id = ?3 AND c_id = ?4",
        )?
        .execute(params![total, w, d, c])?;
    }
    Ok(true)
}

fn stock_level(conn: &Connection, w: u32, d: u32) -> Result<bool, SqlError> {
    let next: i64 = conn
        .prepare_cached("SELECT d_next_o_id FROM district WHERE d_w_id = ?1 AND d_id = ?2")?
        .query_row(params![w, d], |r| r.get(0))?;
    let _: i64 = conn
        .prepare_cached(
            "SELECT count(DISTINCT s_i_id) FROM order_line JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id
             WHERE ol_w_id = ?1 AND ol_d_id = ?2 AND ol_o_id >= ?3 AND s_quantity < 15",
        )?
        .query_row(params![w, d, next - 20], |r| r.get(0))?;
    Ok(false)
}

/// TPC-C's consistency conditions 1, 2 and 4, and the payments against the warehouse's YTD.
pub fn check(conn: &Connection) -> Result<(), Breach> {
    let one = |sql: &str| -> Result<i64, Breach> {
        conn.query_row(sql, [], |r| r.get::<_, i64>(0))
            .map_err(Breach::query(sql))
    };
    let bad_ytd = one(
        "SELECT count(*) FROM warehouse WHERE w_ytd != (SELECT sum(d_ytd) FROM district WHERE d_w_id = w_id)",
    )?;
    let bad_next = one(
        "SELECT count(*) FROM district WHERE d_next_o_id - 1 != coalesce((SELECT max(o_id) FROM orders
         WHERE o_w_id = d_w_id AND o_d_id = d_id), 0)",
    )?;
    let bad_lines = one(
        "SELECT count(*) FROM district WHERE coalesce((SELECT sum(o_ol_cnt) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id), 0)
         != (SELECT count(*) FROM order_line WHERE ol_w_id = d_w_id AND ol_d_id = d_id)",
    )?;
    let bad_history = one(&format!(
        "SELECT count(*) FROM warehouse WHERE w_ytd != {INITIAL_YTD} + coalesce((SELECT sum(h_amount) FROM history WHERE h_w_id = w_id), 0)"
    ))?;
    let n = one("SELECT count(*) FROM tpcc_commits")?;
    let max = one("SELECT coalesce(max(n), 0) FROM tpcc_commits")?;
    match (bad_ytd, bad_next, bad_lines, bad_history, n == max) {
        (0, 0, 0, 0, true) => Ok(()),
        _ => Err(Breach::Tpcc {
            bad_ytd,
            bad_next,
            bad_lines,
            bad_history,
            last_commit: max,
            commits: n,
        }),
    }
}
