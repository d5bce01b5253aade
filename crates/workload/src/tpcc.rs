//! A TPC-C-like transaction generator at the page level (the stand-in for DBT-2 in Möbius §V-B).
//!
//! The database is laid out on logical pages as TPC-C's nine tables, scaled by warehouses
//! (page counts per warehouse assume 4 KB pages and TPC-C row sizes):
//!
//! | table | pages per warehouse | access |
//! |---|---|---|
//! | warehouse | 1 | Payment updates its row |
//! | district | 10 (one per district) | New-Order, Payment update |
//! | customer | 3,000 × 655 B → 480 | Payment, Delivery update one page |
//! | stock | 100,000 × 306 B → 7,500 | New-Order updates 5–15 random pages |
//! | item | 100,000 × 82 B → 2,000 (shared, read-only) | New-Order reads |
//! | orders / new-order / order-line / history | append-only logs, 2,048 pages each, wrapping | New-Order, Payment, Delivery append |
//!
//! Mix (TPC-C §5.2.3 minimums): New-Order 45 %, Payment 43 %, Order-Status 4 %, Delivery 4 %,
//! Stock-Level 4 %. Each transaction's distinct written pages form one atomic write set; its reads
//! are issued first. Order-Status and Stock-Level only read.

use crate::transactions::Txn;
use flash::Lpn;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

const DISTRICTS: u32 = 10;
const CUSTOMER_PAGES: u32 = 480;
const STOCK_PAGES: u32 = 7_500;
const ITEM_PAGES: u32 = 2_000;
const LOG_PAGES: u32 = 2_048;

pub struct Tpcc {
    warehouses: u32,
    per_warehouse: u32,
    item_base: u32,
    logs_base: u32,
    log_cursor: [u32; 4],
}

impl Tpcc {
    /// Pages one warehouse occupies (excluding the shared item table and logs).
    pub const WAREHOUSE_PAGES: u32 = 1 + DISTRICTS + CUSTOMER_PAGES + STOCK_PAGES;

    /// Largest warehouse count that fits in `logical_pages`.
    pub fn fitting(logical_pages: u32, max_warehouses: u32) -> Option<Tpcc> {
        let fixed = ITEM_PAGES + 4 * LOG_PAGES;
        let w = logical_pages.checked_sub(fixed)? / Self::WAREHOUSE_PAGES;
        (w >= 1).then(|| Tpcc::new(w.min(max_warehouses)))
    }

    pub fn new(warehouses: u32) -> Tpcc {
        let per_warehouse = Self::WAREHOUSE_PAGES;
        let item_base = warehouses * per_warehouse;
        Tpcc {
            warehouses,
            per_warehouse,
            item_base,
            logs_base: item_base + ITEM_PAGES,
            log_cursor: [0; 4],
        }
    }

    /// Logical pages the database spans.
    pub fn pages(&self) -> u32 {
        self.logs_base + 4 * LOG_PAGES
    }

    fn warehouse(&self, w: u32) -> Lpn {
        Lpn(w * self.per_warehouse)
    }
    fn district(&self, w: u32, d: u32) -> Lpn {
        Lpn(w * self.per_warehouse + 1 + d)
    }
    fn customer(&self, w: u32, rng: &mut ChaCha8Rng) -> Lpn {
        Lpn(w * self.per_warehouse + 1 + DISTRICTS + rng.random_range(0..CUSTOMER_PAGES))
    }
    fn stock(&self, w: u32, rng: &mut ChaCha8Rng) -> Lpn {
        Lpn(w * self.per_warehouse
            + 1
            + DISTRICTS
            + CUSTOMER_PAGES
            + rng.random_range(0..STOCK_PAGES))
    }
    fn item(&self, rng: &mut ChaCha8Rng) -> Lpn {
        Lpn(self.item_base + rng.random_range(0..ITEM_PAGES))
    }
    /// Appends to log `which` (0 orders, 1 new-order, 2 order-line, 3 history).
    fn append(&mut self, which: usize) -> Lpn {
        let l = Lpn(self.logs_base + which as u32 * LOG_PAGES + self.log_cursor[which]);
        self.log_cursor[which] = (self.log_cursor[which] + 1) % LOG_PAGES;
        l
    }

    pub fn next(&mut self, rng: &mut ChaCha8Rng) -> Txn {
        let w = rng.random_range(0..self.warehouses);
        let roll = rng.random_range(0..100u32);
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        let kind = match roll {
            0..45 => {
                let d = rng.random_range(0..DISTRICTS);
                reads.push(self.warehouse(w));
                reads.push(self.customer(w, rng));
                writes.push(self.district(w, d));
                for _ in 0..rng.random_range(5..=15) {
                    reads.push(self.item(rng));
                    writes.push(self.stock(w, rng));
                }
                writes.push(self.append(0));
                writes.push(self.append(1));
                writes.push(self.append(2));
                "new-order"
            }
            45..88 => {
                let d = rng.random_range(0..DISTRICTS);
                writes.push(self.warehouse(w));
                writes.push(self.district(w, d));
                writes.push(self.customer(w, rng));
                writes.push(self.append(3));
                "payment"
            }
            88..92 => {
                reads.push(self.customer(w, rng));
                reads.push(self.district(w, rng.random_range(0..DISTRICTS)));
                "order-status"
            }
            92..96 => {
                for _ in 0..DISTRICTS {
                    writes.push(self.append(1));
                    writes.push(self.append(0));
                    writes.push(self.append(2));
                    writes.push(self.customer(w, rng));
                }
                "delivery"
            }
            _ => {
                reads.push(self.district(w, rng.random_range(0..DISTRICTS)));
                for _ in 0..20 {
                    reads.push(self.stock(w, rng));
                }
                "stock-level"
            }
        };
        writes.sort_unstable();
        writes.dedup();
        Txn {
            kind,
            reads,
            writes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn mix_and_layout() {
        let mut t = Tpcc::new(2);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut counts = std::collections::BTreeMap::new();
        for _ in 0..10_000 {
            let txn = t.next(&mut rng);
            assert!(txn.writes.iter().chain(&txn.reads).all(|l| l.0 < t.pages()));
            let mut w = txn.writes.clone();
            w.dedup();
            assert_eq!(w.len(), txn.writes.len(), "write sets are distinct pages");
            *counts.entry(txn.kind).or_insert(0u32) += 1;
        }
        assert!((4300..4700).contains(&counts["new-order"]), "{counts:?}");
        assert!((4100..4500).contains(&counts["payment"]), "{counts:?}");
        assert!(Tpcc::fitting(4096, 10).is_none());
        assert_eq!(Tpcc::fitting(1 << 20, 10).unwrap().warehouses, 10);
    }
}
