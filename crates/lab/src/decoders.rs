//! Every on-flash decoder of every format, by name, with the length its callers hand it: the
//! table the decoder fuzz test (crates/cli/tests/decoders_fuzz.rs) and the cargo-fuzz target
//! (fuzz/) share. A decoder may refuse any input of that length; it must not panic or abort.

use flash::Ppn;

/// A decoder, by name, with the size of what it is handed in the code that calls it: a whole
/// page, a whole OOB record, or one fixed-size record sliced from a page. The data comes from
/// the image; the length from the caller.
pub struct Decoder {
    pub name: &'static str,
    pub bytes: usize,
    pub decode: DecodeFn,
}

/// A decoder run on a byte slice; what it returns is dropped (only a panic matters).
pub type DecodeFn = Box<dyn Fn(&[u8])>;

pub fn decoder(name: &'static str, bytes: usize, decode: impl Fn(&[u8]) + 'static) -> Decoder {
    Decoder {
        name,
        bytes,
        decode: Box::new(decode),
    }
}

/// `input` at `len` bytes: cut, or padded with `pad`.
pub fn sized(input: &[u8], len: usize, pad: u8) -> Vec<u8> {
    let mut b = input.to_vec();
    b.resize(len, pad);
    b
}

/// Every decoder of every format.
/// The page size the page-sized decoders read.
const DECODER_PAGE: usize = 4096;

pub fn all() -> Vec<Decoder> {
    [
        ftl_decoders(),
        log_decoders(),
        txflash_decoders(),
        cache_decoders(),
        host_side_decoders(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The decoders of DFTL and Möbius.
fn ftl_decoders() -> Vec<Decoder> {
    vec![
        decoder("dftl oob", dftl::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(dftl::format::OobRecord::decode(b));
        }),
        decoder("dftl translation", DECODER_PAGE, |b| {
            let mut out = vec![Ppn(0); DECODER_PAGE / 4];
            let _ = std::hint::black_box(dftl::format::decode_translation(b, 0, &mut out));
            let crc = dftl::format::translation_crc(b);
            let _ = std::hint::black_box(dftl::format::decode_translation(b, crc, &mut out));
        }),
        decoder("dftl reservation", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(dftl::format::Reservation::decode(b, 512));
        }),
        decoder("dftl checkpoint", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(dftl::format::Checkpoint::decode(b, 512));
        }),
        decoder("dftl seal", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(dftl::format::Seal::decode(b));
        }),
        decoder("mobius page oob", mftl::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(mftl::format::PageOob::decode(b));
        }),
        decoder("mobius inode", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(mftl::format::Inode::decode(b));
        }),
        decoder("mobius tp", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(mftl::format::decode_tp(b));
        }),
        decoder("mobius tp into a view", DECODER_PAGE, |b| {
            // As a reload fills the view: a page's worth of entries, and one more.
            let per = mftl::format::entries_per_page(DECODER_PAGE as u32);
            let mut view = vec![0u32; per + (b.len() % 2)];
            let _ = std::hint::black_box(mftl::format::decode_tp_into(b, &mut view));
        }),
        decoder("mobius gtd", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(mftl::format::decode_gtd(b));
        }),
        decoder("mobius gm seal", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(mftl::format::GmSeal::decode(b));
        }),
    ]
}

/// The decoders of Atomic-Write (and LightTx, which shares its format).
fn log_decoders() -> Vec<Decoder> {
    vec![
        decoder("aw oob", atomic_write::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(atomic_write::format::OobRecord::decode(b));
        }),
        decoder("aw entries", DECODER_PAGE, |b| {
            std::hint::black_box(atomic_write::format::decode_entries(b));
        }),
        decoder("aw root", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(atomic_write::format::Root::decode(b));
        }),
        decoder("aw commit", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(atomic_write::format::CommitRecord::decode(b));
        }),
    ]
}

/// The decoders of TxFlash: traditional and cyclic commit.
fn txflash_decoders() -> Vec<Decoder> {
    vec![
        decoder("tc oob", txflash::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(txflash::format::Oob::decode(b));
        }),
        decoder("tc entry", txflash::format::ENTRY_BYTES, |b| {
            let _ = std::hint::black_box(txflash::format::decode_entry(b));
        }),
        decoder("tc summary", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(txflash::format::decode_summary(b, 7));
        }),
        decoder("tc commit", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(txflash::format::decode_commit(b));
        }),
        decoder("cyclic oob", txflash::cyclic::format::MAX_OOB_BYTES, |b| {
            use txflash::cyclic::format::{CyclicOob, Protocol};
            let _ = std::hint::black_box(CyclicOob::decode(Protocol::Scc, b));
            let _ = std::hint::black_box(CyclicOob::decode(Protocol::Bpcc, b));
        }),
        decoder("cyclic entry", txflash::cyclic::format::ENTRY_BYTES, |b| {
            let _ = std::hint::black_box(txflash::cyclic::format::decode_entry(b));
        }),
        decoder("cyclic summary", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(txflash::cyclic::format::decode_summary(b, 7));
        }),
    ]
}

/// The decoders of OPTR, the write-cached FTL and FAST.
fn cache_decoders() -> Vec<Decoder> {
    vec![
        decoder("optr oob", optr::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(optr::format::PageOob::decode(b));
        }),
        decoder("optr meta", DECODER_PAGE, |b| {
            use optr::format::{MetaPage, PageKind};
            for kind in [PageKind::FullL2p, PageKind::Diff, PageKind::Records] {
                let _ = std::hint::black_box(MetaPage::decode(b, kind, 8, 4));
                let _ = std::hint::black_box(optr::format::decode_pairs(b, kind, 256));
            }
        }),
        decoder("optr summary", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(optr::format::decode_summary(b));
        }),
        decoder("optr seal", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(optr::format::decode_seal(b));
        }),
        decoder("optr records", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(optr::format::decode_records(b));
        }),
        decoder("wcache oob", wcache::wcache::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(wcache::wcache::decode_oob(b));
        }),
        decoder("fast oob", fast::format::OOB_BYTES as usize, |b| {
            let _ = std::hint::black_box(fast::format::PageOob::decode(b));
        }),
    ]
}

/// The decoders of NVMFS, the SQLite directory and content tags.
fn host_side_decoders() -> Vec<Decoder> {
    vec![
        decoder("nvmfs superblock", DECODER_PAGE, |b| {
            std::hint::black_box(nvmfs::layout::Superblock::decode(b).is_ok());
        }),
        decoder("nvmfs inode", nvmfs::layout::INODE_BYTES as usize, |b| {
            let _ = std::hint::black_box(nvmfs::layout::Inode::decode(b));
        }),
        decoder(
            "nvmfs page record",
            nvmfs::layout::PAGE_RECORD_BYTES as usize,
            |b| {
                let _ = std::hint::black_box(nvmfs::layout::PageRecord::decode(b));
            },
        ),
        decoder(
            "nvmfs dir entry",
            nvmfs::layout::DIRENT_BYTES as usize,
            |b| {
                let _ = std::hint::black_box(nvmfs::layout::DirEntry::decode(b));
            },
        ),
        decoder("nvmfs redo log", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(nvmfs::layout::RedoLog::decode(b));
        }),
        decoder("sqlite directory", DECODER_PAGE, |b| {
            std::hint::black_box(sqlite::layout::Directory::decode(b, 65_536, 4096).is_ok());
        }),
        decoder("image header", flash::FileStore::HEADER_FIELD_BYTES, |b| {
            let _ = std::hint::black_box(flash::FileStore::decode_header(b));
        }),
        decoder("content tag", DECODER_PAGE, |b| {
            let _ = std::hint::black_box(flash::ContentTag::decode(b));
        }),
    ]
}
