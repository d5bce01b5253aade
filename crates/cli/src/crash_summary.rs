//! The per-design table and total line that the soaks of real-software campaigns (SQLite, NBD
//! requests) print.

use crashtest::soak;

/// An extra column of a soak's summary table: its header and the cells it counts.
pub type CountedColumn<'a, C> = (&'a str, &'a dyn Fn(&C) -> bool);

/// The per-design table and the total line of a soak of real-software campaigns (SQLite, NBD
/// requests), with an extra column if `counted` names one.
pub fn print_cells_summary<C: soak::SoakCell>(
    report: &soak::CellsReport<C>,
    counted: Option<CountedColumn<C>>,
) {
    let header = counted.map_or(String::new(), |(h, _)| format!(" {h:>7}"));
    println!("design         cells{header}  failing  crash points  violations");
    for d in report.designs() {
        let cells: Vec<&C> = report.cells.iter().filter(|c| c.design() == d).collect();
        let extra = counted.map_or(String::new(), |(_, keep)| {
            format!(" {:>7}", cells.iter().filter(|c| keep(c)).count())
        });
        println!(
            "{d:<13} {:>6}{extra} {:>8} {:>13} {:>11}",
            cells.len(),
            cells.iter().filter(|c| c.failed()).count(),
            cells.iter().map(|c| c.crash_points()).sum::<usize>(),
            cells.iter().map(|c| c.violations()).sum::<usize>()
        );
    }
    println!(
        "total: {} cells, {} crash points, {} violations; GC copied pages during the run in {} cells; {:.0} s",
        report.cells.len(),
        report.crash_points(),
        report.violations(),
        report.cells_with_gc_copies(),
        report.wall_s
    );
}
