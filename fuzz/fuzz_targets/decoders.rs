//! cargo-fuzz target over every on-flash decoder (`lab::decoders::all`, the table the
//! decoder fuzz test in crates/cli/tests/decoders_fuzz.rs uses): the first input byte picks
//! the decoder, the rest is its input at the length its callers hand it. A panic or an abort
//! (an allocation sized by a damaged count) is a finding. docs/crashtest.md.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Table(Vec<lab::decoders::Decoder>);
// The decoders are plain functions of their input; the table is only read.
unsafe impl Send for Table {}
unsafe impl Sync for Table {}

static DECODERS: OnceLock<Table> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let table = &DECODERS.get_or_init(|| Table(lab::decoders::all())).0;
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let decoder = &table[pick as usize % table.len()];
    let input = lab::decoders::sized(rest, decoder.bytes, 0);
    (decoder.decode)(&input);
});
