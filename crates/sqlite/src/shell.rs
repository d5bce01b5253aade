//! The statement runner of `mobius sql`: every statement it is given, in order, as the
//! `sqlite3` shell runs them (docs/sqlite.md, "The shell").
//!
//! Input comes as whole scripts (one per command-line argument) or as lines (standard input).
//! A line is held until the text so far ends a statement, as SQLite's own `sqlite3_complete`
//! decides (a `;` outside quotes, comments and a trigger's body), so a statement may span lines
//! and a line may hold several. A script is cut into statements the same way, and each piece is
//! prepared by SQLite (`sqlite3_prepare_v2` with its tail pointer, through [`rusqlite::Batch`]).
//! The first statement that fails stops the run: nothing after it runs, and the error names the
//! statement, its number and where it came from.

use rusqlite::types::ValueRef;
use rusqlite::{Batch, Connection, Statement};
use std::ffi::CString;
use std::io::Write;

/// Longest statement text an error quotes; a longer one is cut (its number and place name it).
const QUOTED_CHARS: usize = 160;

/// Where a statement came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The n-th script argument (from 1).
    Argument(usize),
    /// Standard input, the line the statement starts on (from 1).
    Line(usize),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Argument(n) => write!(f, "argument {n}"),
            Origin::Line(n) => write!(f, "line {n}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    /// A statement SQLite refused to prepare or failed to run; later statements did not run.
    #[error("statement {number} ({origin}: {sql}) failed: {}", reason(.source))]
    Statement {
        /// Its number among the statements given (from 1).
        number: usize,
        origin: Origin,
        /// Its text on one line, cut after [`QUOTED_CHARS`] characters.
        sql: String,
        source: rusqlite::Error,
    },
    /// SQLite reads text only up to a NUL byte: what follows would be dropped unseen.
    #[error("{origin} holds a NUL byte, which SQL text cannot contain")]
    NulByte { origin: Origin },
    #[error("writing the rows: {0}")]
    Output(#[from] std::io::Error),
}

/// Whether `sql` ends a statement: SQLite's `sqlite3_complete` (true when the text ends with a
/// `;` that closes a statement, outside quotes, comments and a trigger's body).
pub fn is_complete(sql: &str) -> bool {
    let Ok(text) = CString::new(sql) else {
        return false; // a NUL byte: refused before it is run ([`ShellError::NulByte`])
    };
    // SAFETY: `text` is a NUL-terminated string that outlives the call; sqlite3_complete only
    // reads it.
    unsafe { rusqlite::ffi::sqlite3_complete(text.as_ptr()) != 0 }
}

/// The statements of `text` with their byte offsets: each piece ends at the first `;` after
/// which the piece [`is_complete`]; the rest (a last statement without `;`, or only
/// whitespace and comments) is the last piece.
fn pieces(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in text.match_indices(';') {
        if is_complete(&text[start..=i]) {
            out.push((start, &text[start..=i]));
            start = i + 1;
        }
    }
    if !text[start..].trim().is_empty() {
        out.push((start, &text[start..]));
    }
    out
}

/// SQLite's message, without the statement's text that a syntax error repeats in full (the
/// error quotes it, cut).
fn reason(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        e => e.to_string(),
    }
}

/// A statement's text for an error: on one line, cut after [`QUOTED_CHARS`] characters.
fn quoted(sql: &str) -> String {
    let one_line = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// Runs statements on one connection and prints their rows to `out`, `|`-separated like the
/// `sqlite3` shell's list mode.
pub struct Shell<'c, W: Write> {
    conn: &'c Connection,
    out: W,
    /// Statements run so far.
    statements: usize,
    /// Lines read but not yet ending a statement, and the line number of the first.
    pending: String,
    pending_line: usize,
    lines: usize,
}

impl<'c, W: Write> Shell<'c, W> {
    pub fn new(conn: &'c Connection, out: W) -> Shell<'c, W> {
        Shell {
            conn,
            out,
            statements: 0,
            pending: String::new(),
            pending_line: 1,
            lines: 0,
        }
    }

    /// Statements run so far (those that failed not counted).
    pub fn statements_run(&self) -> usize {
        self.statements
    }

    /// Runs every statement of script argument `n` (from 1); the last needs no `;`.
    pub fn run_argument(&mut self, n: usize, sql: &str) -> Result<(), ShellError> {
        self.run_script(sql, &|_| Origin::Argument(n))
    }

    /// Takes one line of standard input: runs the statements it completes, holds the rest.
    pub fn feed_line(&mut self, line: &str) -> Result<(), ShellError> {
        self.lines += 1;
        if line.contains('\0') {
            return Err(ShellError::NulByte {
                origin: Origin::Line(self.lines),
            });
        }
        if self.pending.trim().is_empty() {
            self.pending.clear();
            self.pending_line = self.lines;
        }
        self.pending.push_str(line);
        self.pending.push('\n');
        if is_complete(&self.pending) {
            self.run_pending()?;
        }
        Ok(())
    }

    /// The end of standard input: a last statement without `;` runs as it is (SQLite reports
    /// one cut short, e.g. an unclosed quote, as an incomplete input).
    pub fn finish(&mut self) -> Result<(), ShellError> {
        if self.pending.trim().is_empty() {
            return Ok(());
        }
        self.run_pending()
    }

    fn run_pending(&mut self) -> Result<(), ShellError> {
        let text = std::mem::take(&mut self.pending);
        let first = self.pending_line;
        self.run_script(&text, &|offset| {
            Origin::Line(first + text[..offset].matches('\n').count())
        })
    }

    /// Runs every statement of `text`; `origin` places a statement by its byte offset.
    fn run_script(
        &mut self,
        text: &str,
        origin: &dyn Fn(usize) -> Origin,
    ) -> Result<(), ShellError> {
        if let Some(at) = text.find('\0') {
            return Err(ShellError::NulByte { origin: origin(at) });
        }
        for (start, piece) in pieces(text) {
            let lead = piece.len() - piece.trim_start().len();
            let fail = |number, source| ShellError::Statement {
                number,
                origin: origin(start + lead),
                sql: quoted(piece),
                source,
            };
            let mut batch = Batch::new(self.conn, piece);
            loop {
                let number = self.statements + 1;
                let statement = match batch.next() {
                    Ok(Some(s)) => s,
                    Ok(None) => break,
                    Err(e) => return Err(fail(number, e)),
                };
                match self.run_statement(statement) {
                    Ok(()) => self.statements += 1,
                    Err(StepError::Sqlite(e)) => return Err(fail(number, e)),
                    Err(StepError::Output(e)) => return Err(ShellError::Output(e)),
                }
            }
        }
        Ok(())
    }

    /// Steps one statement to its end, printing each row.
    fn run_statement(&mut self, mut statement: Statement<'_>) -> Result<(), StepError> {
        let columns = statement.column_count();
        let mut rows = statement.raw_query(); // parameters unbound: NULL, as in sqlite3
        while let Some(row) = rows.next()? {
            let cells: Vec<String> = (0..columns)
                .map(|i| match row.get_ref(i) {
                    Ok(ValueRef::Null) => String::new(),
                    Ok(ValueRef::Integer(v)) => v.to_string(),
                    Ok(ValueRef::Real(v)) => v.to_string(),
                    Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                    Ok(ValueRef::Blob(b)) => format!("<{} bytes>", b.len()),
                    Err(e) => format!("<{e}>"),
                })
                .collect();
            writeln!(self.out, "{}", cells.join("|"))?;
        }
        Ok(())
    }
}

/// Why a statement stopped: SQLite failed it, or its rows could not be written.
enum StepError {
    Sqlite(rusqlite::Error),
    Output(std::io::Error),
}

impl From<rusqlite::Error> for StepError {
    fn from(e: rusqlite::Error) -> StepError {
        StepError::Sqlite(e)
    }
}

impl From<std::io::Error> for StepError {
    fn from(e: std::io::Error) -> StepError {
        StepError::Output(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell_output(
        run: impl FnOnce(&mut Shell<&mut Vec<u8>>) -> Result<(), ShellError>,
    ) -> (String, Result<(), ShellError>) {
        let conn = Connection::open_in_memory().unwrap();
        let mut out = Vec::new();
        let result = run(&mut Shell::new(&conn, &mut out));
        (String::from_utf8(out).unwrap(), result)
    }

    #[test]
    fn sqlite_decides_where_a_statement_ends() {
        assert!(is_complete("SELECT 1;"));
        assert!(is_complete("SELECT 1; -- done\n"));
        assert!(!is_complete("SELECT 1"));
        assert!(!is_complete("SELECT 'a;"));
        assert!(!is_complete("SELECT 1 /* ; */"));
        assert!(!is_complete(
            "CREATE TRIGGER r AFTER INSERT ON t BEGIN DELETE FROM t;"
        ));
        assert!(is_complete(
            "CREATE TRIGGER r AFTER INSERT ON t BEGIN DELETE FROM t; END;"
        ));
        assert!(!is_complete("SELECT 1;\0"));
        let p: Vec<&str> = pieces("SELECT ';'; SELECT 2;SELECT 3")
            .into_iter()
            .map(|p| p.1)
            .collect();
        assert_eq!(p, ["SELECT ';';", " SELECT 2;", "SELECT 3"]);
    }

    #[test]
    fn every_statement_of_an_argument_runs_in_order() {
        let (out, r) = shell_output(|s| {
            s.run_argument(
                1,
                "CREATE TABLE t(x); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2);",
            )?;
            s.run_argument(2, "SELECT x FROM t ORDER BY x; SELECT count(*) FROM t")?;
            assert_eq!(s.statements_run(), 5);
            Ok(())
        });
        r.unwrap();
        assert_eq!(out, "1\n2\n2\n");
    }

    #[test]
    fn lines_are_held_until_a_statement_ends() {
        let (out, r) = shell_output(|s| {
            for line in [
                "CREATE TABLE t(x, y); INSERT INTO t",
                "  VALUES (1, 'a;",
                "b'); SELECT y FROM t;",
                "-- a comment",
                "CREATE TRIGGER d AFTER INSERT ON t BEGIN",
                "  DELETE FROM t WHERE x = 1;",
                "END;",
                "INSERT INTO t VALUES (2, 'c'); SELECT x FROM t",
            ] {
                s.feed_line(line)?;
            }
            assert_eq!(s.statements_run(), 4, "the last line waits for its `;`");
            s.finish()?;
            assert_eq!(s.statements_run(), 6);
            Ok(())
        });
        r.unwrap();
        assert_eq!(out, "a;\nb\n2\n");
    }

    #[test]
    fn the_first_failure_stops_the_run_and_names_the_statement() {
        let conn = Connection::open_in_memory().unwrap();
        let mut out = Vec::new();
        let mut s = Shell::new(&conn, &mut out);
        s.feed_line("CREATE TABLE t(x UNIQUE);").unwrap();
        s.feed_line("INSERT INTO t VALUES (1);").unwrap();
        let e = s
            .feed_line(
                "INSERT INTO t VALUES (2); INSERT INTO t VALUES (1); INSERT INTO t VALUES (3);",
            )
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(
                e,
                ShellError::Statement {
                    number: 4,
                    origin: Origin::Line(3),
                    ..
                }
            ),
            "{msg}"
        );
        assert!(
            msg.contains("statement 4 (line 3: INSERT INTO t VALUES (1);)"),
            "{msg}"
        );
        assert!(msg.contains("UNIQUE constraint failed"), "{msg}");
        drop(s);
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2, "the statement after the failing one ran");

        let mut s = Shell::new(&conn, &mut out);
        let e = s
            .run_argument(2, "SELECT 1;\n  SELEC 2; SELECT 3")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"statement 2 (argument 2: SELEC 2;) failed: near "SELEC": syntax error"#
        );
        assert_eq!(s.statements_run(), 1);
    }

    /// Random text over SQL's delimiters: the pieces cover the text in order (all but blank
    /// text after the last), and running it is an answer or an error, never a panic.
    #[test]
    fn any_text_splits_into_its_pieces_and_runs_without_panicking() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(67);
        let alphabet: Vec<char> = "; '\"-/*\nxSELECT1()BEGINEND".chars().collect();
        let conn = Connection::open_in_memory().unwrap();
        for _ in 0..3000 {
            let len = rng.random_range(0..40);
            let text: String = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let joined: String = pieces(&text).into_iter().map(|p| p.1).collect();
            assert!(text.starts_with(&joined), "{text:?}");
            assert!(text[joined.len()..].trim().is_empty(), "{text:?}");
            let _ = Shell::new(&conn, std::io::sink()).run_argument(1, &text);
        }
    }

    #[test]
    fn odd_input_is_an_error_not_a_panic() {
        let (_, r) = shell_output(|s| s.run_argument(1, "SELECT 1;\0SELECT 2;"));
        assert!(matches!(
            r,
            Err(ShellError::NulByte {
                origin: Origin::Argument(1)
            })
        ));
        let (_, r) = shell_output(|s| {
            s.feed_line("SELECT 'unclosed")?;
            s.finish()
        });
        let e = r.unwrap_err();
        assert!(
            e.to_string()
                .contains("statement 1 (line 1: SELECT 'unclosed)"),
            "{e}"
        );
        let long = format!("SELECT {}", "1 + ".repeat(200));
        let (_, r) = shell_output(|s| s.run_argument(1, &long));
        let e = r.unwrap_err().to_string();
        assert!(e.len() < 300 && e.contains('…'), "{e}");
        let (out, r) = shell_output(|s| {
            s.run_argument(1, "  ;;  -- nothing\n")?;
            s.feed_line("")?;
            s.finish()
        });
        r.unwrap();
        assert_eq!(out, "");
    }
}
