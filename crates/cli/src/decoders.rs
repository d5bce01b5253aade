//! Every on-flash decoder of every format, by name, with the length its callers hand it: the
//! table the decoder fuzz test (tests/decoders_fuzz.rs) and the cargo-fuzz target (fuzz/)
//! share. A decoder may refuse any input of that length; it must not panic or abort.

use flash::Ppn;

/// A decoder, by name, with the size of what it is handed in the code that calls it: a whole
/// page, a whole OOB record, or one fixed-size record sliced from a page. The data comes from
/// the image; the length from the caller.
pub struct Decoder {
    pub name: &'static str,
    pub bytes: usize,
    pub decode: Box<dyn Fn(&[u8])>,
}

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
pub fn all() -> Vec<Decoder> {
    use std::hint::black_box as keep;
    const PAGE: usize = 4096;
    vec![
        decoder("dftl oob", dftl::format::OOB_BYTES as usize, |b| {
            keep(dftl::format::OobRecord::decode(b));
        }),
        decoder("dftl translation", PAGE, |b| {
            let mut out = vec![Ppn(0); PAGE / 4];
            keep(dftl::format::decode_translation_checked(b, 0, &mut out));
            dftl::format::decode_translation(b, &mut out);
        }),
        decoder("dftl reservation", PAGE, |b| {
            keep(dftl::format::Reservation::decode(b, 512));
        }),
        decoder("dftl checkpoint", PAGE, |b| {
            keep(dftl::format::Checkpoint::decode(b, 512));
        }),
        decoder("dftl seal", PAGE, |b| {
            keep(dftl::format::Seal::decode(b));
        }),
        decoder("mobius page oob", mftl::format::OOB_BYTES as usize, |b| {
            keep(mftl::format::PageOob::decode(b));
        }),
        decoder("mobius inode", PAGE, |b| {
            keep(mftl::format::Inode::decode(b));
        }),
        decoder("mobius tp", PAGE, |b| {
            keep(mftl::format::decode_tp(b));
        }),
        decoder("mobius gtd", PAGE, |b| {
            keep(mftl::format::decode_gtd(b));
        }),
        decoder("mobius gm seal", PAGE, |b| {
            keep(mftl::format::GmSeal::decode(b));
        }),
        decoder("aw oob", atomic_write::format::OOB_BYTES as usize, |b| {
            keep(atomic_write::format::OobRecord::decode(b));
        }),
        decoder("aw entries", PAGE, |b| {
            keep(atomic_write::format::decode_entries(b));
        }),
        decoder("aw root", PAGE, |b| {
            keep(atomic_write::format::Root::decode(b));
        }),
        decoder("aw commit", PAGE, |b| {
            keep(atomic_write::format::CommitRecord::decode(b));
        }),
        decoder("tc oob", txflash::format::OOB_BYTES as usize, |b| {
            keep(txflash::format::Oob::decode(b));
        }),
        decoder("tc entry", txflash::format::ENTRY_BYTES, |b| {
            keep(txflash::format::decode_entry(b));
        }),
        decoder("tc summary", PAGE, |b| {
            keep(txflash::format::decode_summary(b, 7));
        }),
        decoder("tc commit", PAGE, |b| {
            keep(txflash::format::decode_commit(b));
        }),
        decoder("cyclic oob", txflash::cyclic::format::MAX_OOB_BYTES, |b| {
            use txflash::cyclic::format::{CyclicOob, Protocol};
            keep(CyclicOob::decode(Protocol::Scc, b));
            keep(CyclicOob::decode(Protocol::Bpcc, b));
        }),
        decoder("cyclic entry", txflash::cyclic::format::ENTRY_BYTES, |b| {
            keep(txflash::cyclic::format::decode_entry(b));
        }),
        decoder("cyclic summary", PAGE, |b| {
            keep(txflash::cyclic::format::decode_summary(b, 7));
        }),
        decoder("optr oob", optr::format::OOB_BYTES as usize, |b| {
            keep(optr::format::PageOob::decode(b));
        }),
        decoder("optr meta", PAGE, |b| {
            use optr::format::{MetaPage, PageKind};
            for kind in [PageKind::FullL2p, PageKind::Diff, PageKind::Records] {
                keep(MetaPage::decode(b, kind, 8, 4));
                keep(optr::format::decode_pairs(b, kind, 256));
            }
        }),
        decoder("optr summary", PAGE, |b| {
            keep(optr::format::decode_summary(b));
        }),
        decoder("optr seal", PAGE, |b| {
            keep(optr::format::decode_seal(b));
        }),
        decoder("optr records", PAGE, |b| {
            keep(optr::format::decode_records(b));
        }),
        decoder("wcache oob", wcache::wcache::OOB_BYTES as usize, |b| {
            keep(wcache::wcache::decode_oob(b));
        }),
        decoder("nvmfs superblock", PAGE, |b| {
            keep(nvmfs::layout::Superblock::decode(b).is_ok());
        }),
        decoder("nvmfs inode", nvmfs::layout::INODE_BYTES as usize, |b| {
            keep(nvmfs::layout::Inode::decode(b));
        }),
        decoder(
            "nvmfs page record",
            nvmfs::layout::PAGE_RECORD_BYTES as usize,
            |b| {
                keep(nvmfs::layout::PageRecord::decode(b));
            },
        ),
        decoder(
            "nvmfs dir entry",
            nvmfs::layout::DIRENT_BYTES as usize,
            |b| {
                keep(nvmfs::layout::DirEntry::decode(b));
            },
        ),
        decoder("nvmfs redo log", PAGE, |b| {
            keep(nvmfs::layout::RedoLog::decode(b));
        }),
        decoder("sqlite directory", PAGE, |b| {
            keep(sqlite::layout::Directory::decode(b, 65_536, 4096).is_ok());
        }),
        decoder("content tag", PAGE, |b| {
            keep(flash::ContentTag::decode(b));
        }),
    ]
}
