//! A trace's metadata: the `# key: value` comment lines at its head.
//!
//! Every reader skips `#` lines, so a recorder may say in them what the trace is: the command
//! that made it, the software's version, the device, the workload, how many of the engine's own
//! transactions it holds (tools/record-engine-traces writes these; docs/engine-traces.md lists
//! the keys). Only the comment lines before the first request are metadata; a `#` line that is
//! not `key: value` with a key without spaces (a free-text title) is skipped.

use std::collections::BTreeMap;
use std::io::{BufRead, Read};

use crate::TraceError;

/// The `key: value` pairs of a trace's leading comment lines, keys in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Meta(pub BTreeMap<String, String>);

impl Meta {
    /// The value of `key`, if the trace states it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

/// The metadata of a trace (gzip or plain text, by its magic bytes).
pub fn read_meta<'a>(input: impl Read + 'a) -> Result<Meta, TraceError> {
    let text = crate::decompressed(input)?;
    let mut meta = BTreeMap::new();
    for line in text.lines() {
        let line = line?;
        let Some(comment) = line.trim().strip_prefix('#') else {
            if line.trim().is_empty() {
                continue;
            }
            break;
        };
        if let Some((key, value)) = comment.split_once(": ") {
            let key = key.trim();
            if !key.is_empty() && !key.contains(' ') {
                meta.insert(key.to_string(), value.trim().to_string());
            }
        }
    }
    Ok(Meta(meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_key_value_comments_are_the_metadata() {
        let text = "# mobius engine trace: pgbench-atomic\n# free text, not a pair\n\
                    # engine-transactions: 4000\n#clients: 4\n\n0 WRITE 0 4096 -\n# late: no\n";
        let meta = read_meta(text.as_bytes()).unwrap();
        assert_eq!(meta.get("engine-transactions"), Some("4000"));
        assert_eq!(meta.get("clients"), Some("4"));
        assert_eq!(
            meta.get("late"),
            None,
            "only the lines before the first request"
        );
        assert_eq!(meta.get("mobius engine trace"), None, "keys have no spaces");
        assert_eq!(meta.0.len(), 2);
    }

    #[test]
    fn gzip_metadata_reads_the_same() {
        use flate2::write::GzEncoder;
        use std::io::Write;
        let text = "# clients: 8\n0 FLUSH 0 0 -\n";
        let mut enc = GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(
            read_meta(gz.as_slice()).unwrap(),
            read_meta(text.as_bytes()).unwrap()
        );
        assert_eq!(read_meta("".as_bytes()).unwrap(), Meta::default());
    }
}
