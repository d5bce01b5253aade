//! The file-backed image: survives the process, refuses another geometry or a damaged header,
//! and turns an interrupted program into a torn page.

use flash::{
    BlockId, Content, ContentTag, DeviceConfig, FileStore, Flash, FlashError, ImageIdentity,
    OpCause, PageState, Ppn, ReadStatus, Store,
};

fn config() -> DeviceConfig {
    DeviceConfig::preset("small").unwrap()
}

fn id() -> ImageIdentity {
    ImageIdentity {
        design: "mobius".into(),
        format_version: 1,
        params_hash: 7,
    }
}

/// A flash device on a new image file at `path`.
fn new_image(path: &std::path::Path) -> Flash {
    let c = config();
    let store = FileStore::create(path, &c.geometry, 16, &id()).unwrap();
    Flash::new(c, Box::new(store))
}

fn tag(lpn: u32, write: u64) -> Content {
    Content::Tag(ContentTag { lpn, write })
}

/// A page of real bytes, as a design's metadata pages are.
fn metadata_page() -> Content {
    Content::Bytes(vec![0xAB; 4096].into_boxed_slice())
}

#[test]
fn contents_outlive_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    {
        let store = FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
        let mut f = Flash::new(c.clone(), Box::new(store));
        f.program(Ppn(0), &tag(3, 9), &[7; 16], 0, OpCause::HostData)
            .unwrap();
        f.program(Ppn(1), &metadata_page(), &[1], 0, OpCause::Mapping)
            .unwrap();
        f.erase(BlockId(5), 0, OpCause::GcCopy).unwrap();
        f.sync().unwrap();
    }
    let store = FileStore::open(&path, &c.geometry, 16, &id()).unwrap();
    let mut f = Flash::new(c, Box::new(store));
    let mut oob = [0u8; 16];
    let ReadStatus::Data(d) = f.read(Ppn(0), &mut oob, 0, OpCause::Recovery).unwrap().0 else {
        panic!("page 0 lost")
    };
    assert_eq!(d.tag(), Some(ContentTag { lpn: 3, write: 9 }));
    assert_eq!(oob, [7; 16]);
    let ReadStatus::Data(d) = f.read(Ppn(1), &mut oob, 0, OpCause::Recovery).unwrap().0 else {
        panic!("page 1 lost")
    };
    assert_eq!(d.as_bytes().unwrap(), &[0xAB; 4096][..]);
    // A peek reads from the file just the bytes asked for.
    assert_eq!(f.peek_u32_le(Ppn(1), 4092).unwrap(), 0xABAB_ABAB);
    assert_eq!(&*f.peek_page(Ppn(1)).unwrap(), &[0xAB; 4096][..]);
    assert_eq!(f.erase_count(BlockId(5)), 1);
    assert_eq!(
        f.write_pointer(BlockId(0)),
        2,
        "write pointer is rebuilt from the image"
    );
    assert!(matches!(
        f.program(Ppn(0), &tag(0, 0), &[], 0, OpCause::HostData),
        Err(FlashError::ProgramNotErased { .. })
    ));
}

#[test]
fn another_geometry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let mut other = c.geometry.clone();
    other.blocks_per_chip *= 2;
    let err = FileStore::open(&path, &other, 16, &id())
        .err()
        .expect("must refuse");
    assert!(
        matches!(err, FlashError::ImageGeometryMismatch { .. }),
        "{err}"
    );
    let err = FileStore::open(&path, &c.geometry, 32, &id())
        .err()
        .expect("must refuse another OOB record size");
    assert!(
        matches!(err, FlashError::ImageGeometryMismatch { .. }),
        "{err}"
    );
}

#[test]
fn damaged_or_foreign_files_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let c = config();
    let path = dir.path().join("dev.img");
    FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[13] ^= 0xFF;
    std::fs::write(&path, &bytes).unwrap();
    let err = FileStore::open(&path, &c.geometry, 16, &id())
        .err()
        .unwrap();
    assert!(err.to_string().contains("checksum"), "{err}");
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, b"hello").unwrap();
    let err = FileStore::open(&junk, &c.geometry, 16, &id())
        .err()
        .unwrap();
    assert!(matches!(err, FlashError::Image { .. }), "{err}");
    let missing = FileStore::open(&dir.path().join("none.img"), &c.geometry, 16, &id())
        .err()
        .unwrap();
    assert!(matches!(missing, FlashError::Io(_)), "{missing}");
}

#[test]
fn a_program_cut_short_in_the_file_is_a_torn_page() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    let mut store = FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    // What a process killed between the "torn" mark and the "programmed" mark leaves behind.
    store.set_torn(Ppn(4));
    drop(store);
    let store = FileStore::open(&path, &c.geometry, 16, &id()).unwrap();
    assert_eq!(store.page_state(Ppn(4)), PageState::Torn);
    let mut f = Flash::new(c, Box::new(store));
    let mut oob = [0u8; 16];
    assert_eq!(
        f.read(Ppn(4), &mut oob, 0, OpCause::Recovery).unwrap().0,
        ReadStatus::Uncorrectable
    );
    assert_eq!(f.write_pointer(BlockId(0)), 5);
}

#[test]
fn snapshot_of_a_file_image_is_an_equal_memory_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let mut f = new_image(&path);
    f.program(Ppn(0), &tag(1, 1), &[5], 0, OpCause::HostData)
        .unwrap();
    f.erase(BlockId(2), 0, OpCause::GcCopy).unwrap();
    let snap = f.store().snapshot();
    assert_eq!(snap.page_state(Ppn(0)), PageState::Programmed);
    assert_eq!(
        snap.data(Ppn(0)).tag(),
        Some(ContentTag { lpn: 1, write: 1 })
    );
    assert_eq!(snap.erase_count(BlockId(2)), 1);
}

#[test]
fn an_image_replaced_by_a_power_cut_image_holds_exactly_it() {
    // The operation log's image at an instant (a program in flight torn, a later one absent)
    // written over the file: what `mobius serve --power-cut-signal` does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    let store = FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let mut f = Flash::new(c.clone(), Box::new(store));
    f.erase(BlockId(3), 0, OpCause::GcCopy).unwrap();
    let base = f.start_recording();
    let a = f
        .program(Ppn(0), &tag(1, 1), &[1; 16], 0, OpCause::HostData)
        .unwrap();
    let b = f
        .program(Ppn(1), &tag(2, 2), &[2; 16], a.end_ns, OpCause::HostData)
        .unwrap();
    f.program(Ppn(2), &tag(3, 3), &[3; 16], b.end_ns, OpCause::HostData)
        .unwrap();
    let log = f.take_log().unwrap();
    let cut = (b.start_ns + b.end_ns) / 2;
    let image = log.image_at(base.as_ref(), cut, true);
    drop(f);
    FileStore::replace_with(&path, image.as_ref(), &id()).unwrap();
    let store = FileStore::open(&path, &c.geometry, 16, &id()).unwrap();
    assert_eq!(store.page_state(Ppn(0)), PageState::Programmed);
    assert_eq!(
        store.data(Ppn(0)).tag(),
        Some(ContentTag { lpn: 1, write: 1 })
    );
    assert_eq!(
        store.page_state(Ppn(1)),
        PageState::Torn,
        "in flight at the cut"
    );
    assert_eq!(
        store.page_state(Ppn(2)),
        PageState::Erased,
        "started after the cut"
    );
    assert_eq!(store.erase_count(BlockId(3)), 1);
}

#[test]
fn an_image_opened_as_another_design_or_with_other_parameters_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let header = FileStore::read_header(&path).unwrap();
    assert_eq!(header.identity, id());
    assert_eq!(header.geometry, c.geometry);
    assert_eq!(header.oob_record_bytes, 16);
    // TxFlash keeps 16 OOB bytes too: only the recorded design tells the images apart.
    for other in [
        ImageIdentity {
            design: "txflash-tc".into(),
            format_version: 1,
            params_hash: 7,
        },
        ImageIdentity {
            design: "mobius".into(),
            format_version: 1,
            params_hash: 8,
        },
    ] {
        let err = FileStore::open(&path, &c.geometry, 16, &other)
            .err()
            .expect("must refuse");
        assert!(matches!(err, FlashError::ImageForeign { .. }), "{err}");
        assert!(err.to_string().contains("'mobius'"), "{err}");
    }
    let long = ImageIdentity {
        design: "x".repeat(33),
        format_version: 1,
        params_hash: 0,
    };
    let err = FileStore::create(&dir.path().join("l.img"), &c.geometry, 16, &long)
        .err()
        .unwrap();
    assert!(matches!(err, FlashError::Image { .. }), "{err}");
}

#[test]
fn an_image_of_the_first_format_version_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = FileStore::open(&path, &c.geometry, 16, &id())
        .err()
        .unwrap();
    assert!(err.to_string().contains("format version 1"), "{err}");
}

proptest::proptest! {
    /// The header decoder on arbitrary bytes, and on a valid header with bytes flipped: a typed
    /// error or a header, never a panic.
    #[test]
    fn header_decoding_never_panics(
        junk in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
        flips in proptest::collection::btree_map(0usize..88, 1u8..=255, 0..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.img");
        std::fs::write(&path, &junk).unwrap();
        let _ = FileStore::read_header(&path);
        let c = config();
        FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut header = [0u8; 88];
        file.read_exact_at(&mut header, 0).unwrap();
        for (at, x) in &flips {
            header[*at] ^= x;
        }
        file.write_all_at(&header, 0).unwrap();
        let r = FileStore::open(&path, &c.geometry, 16, &id());
        if !flips.is_empty() {
            proptest::prop_assert!(r.is_err(), "a damaged header was accepted");
        }
    }
}

/// An image whose design wrote another version of its on-flash format (its OOB records or
/// metadata pages laid out differently) is refused before any recovery reads it; an image of
/// the previous file layout (version 2, before the header recorded that version) too.
#[test]
fn an_image_of_another_design_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let newer = ImageIdentity {
        format_version: 2,
        ..id()
    };
    let err = FileStore::open(&path, &c.geometry, 16, &newer)
        .err()
        .expect("must refuse");
    assert!(matches!(err, FlashError::ImageForeign { .. }), "{err}");
    assert!(err.to_string().contains("on-flash format 1"), "{err}");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let err = FileStore::open(&path, &c.geometry, 16, &id())
        .err()
        .unwrap();
    assert!(err.to_string().contains("format version 2"), "{err}");
}

/// A hint's read never touches the image file: `hint_u32_le` answers `None` on a file-backed
/// store (where `peek_u32_le` reads the file) and leaves its error count as it was.
#[test]
fn a_hint_does_not_read_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    let image = FileStore::create(&path, &c.geometry, 16, &id()).unwrap();
    let mut f = Flash::new(c, Box::new(image));
    f.program(Ppn(1), &metadata_page(), &[1], 0, OpCause::Mapping)
        .unwrap();
    let errors = f.store().io_errors();
    assert_eq!(f.hint_u32_le(Ppn(1), 4), None);
    assert_eq!(f.store().io_errors(), errors);
    assert_eq!(
        f.peek_u32_le(Ppn(1), 4).unwrap(),
        0xABAB_ABAB,
        "the page is there"
    );
}

/// One process per image: while a store holds the image, opening it again, creating over it
/// or replacing it is refused with `ImageLocked`, and the file stays byte for byte as it was.
#[test]
fn an_image_held_open_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    let mut f = new_image(&path);
    f.program(Ppn(0), &tag(1, 1), &[5; 16], 0, OpCause::HostData)
        .unwrap();
    f.sync().unwrap();
    let before = std::fs::read(&path).unwrap();
    let locked = |err: FlashError| match err {
        FlashError::ImageLocked { path: p, holder } => {
            assert_eq!(p, path.display().to_string());
            assert!(
                holder.starts_with(&format!("pid {}", std::process::id())),
                "{holder}"
            );
        }
        other => panic!("not refused as locked: {other}"),
    };
    locked(
        FileStore::open(&path, &c.geometry, 16, &id())
            .err()
            .unwrap(),
    );
    locked(
        FileStore::create(&path, &c.geometry, 16, &id())
            .err()
            .unwrap(),
    );
    let image = f.store().snapshot();
    locked(FileStore::replace_with(&path, image.as_ref(), &id()).unwrap_err());
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a refused open changed the image"
    );
    drop(f);
    let store = FileStore::open(&path, &c.geometry, 16, &id()).expect("free once closed");
    assert_eq!(store.page_state(Ppn(0)), PageState::Programmed);
}

/// Every page state, page, OOB record, erase count and erase-torn flag of two images, equal.
fn assert_same_image(file: &dyn Store, model: &dyn Store, what: &str) {
    let g = file.geometry().clone();
    let (mut a, mut b) = ([0u8; 16], [0u8; 16]);
    for p in 0..g.pages() {
        let ppn = Ppn(p);
        assert_eq!(
            file.page_state(ppn),
            model.page_state(ppn),
            "{what}: {ppn:?}"
        );
        if file.page_state(ppn) == PageState::Programmed {
            let bytes = |s: &dyn Store| s.data(ppn).to_page_bytes(g.page_bytes as usize);
            assert_eq!(bytes(file), bytes(model), "{what}: data of {ppn:?}");
            file.oob(ppn, &mut a);
            model.oob(ppn, &mut b);
            assert_eq!(a, b, "{what}: OOB of {ppn:?}");
        }
    }
    for k in 0..g.blocks() {
        let block = BlockId(k);
        assert_eq!(file.erase_count(block), model.erase_count(block), "{what}");
        assert_eq!(file.erase_torn(block), model.erase_torn(block), "{what}");
    }
}

/// What a `kill -9` leaves: after each image write, a copy of the file (the image the process
/// would leave if killed right then) holds exactly the first writes in issue order
/// (`OpLog::image_after_writes`), although the simulated operations complete in another order;
/// a program cut short is the next write torn.
#[test]
fn a_killed_process_leaves_a_prefix_of_its_writes_in_issue_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    let c = config();
    let chip1 = c.geometry.pages_per_chip();
    let mut f = new_image(&path);
    f.program(Ppn(64), &tag(9, 1), &[9; 16], 0, OpCause::HostData)
        .unwrap();
    let base = f.start_recording();
    // Issued late on chip 0 (a commit record), then early on chip 1 (its data): the data
    // completes first in simulated time, but reaches the file second.
    let steps: [&dyn Fn(&mut Flash); 4] = [
        &|f| {
            let late = 5_000_000;
            f.program(Ppn(0), &metadata_page(), &[1; 16], late, OpCause::TxMeta)
                .map(drop)
                .unwrap()
        },
        &|f| {
            f.program(Ppn(chip1), &tag(2, 2), &[2; 16], 0, OpCause::HostData)
                .map(drop)
                .unwrap()
        },
        &|f| f.erase(BlockId(2), 0, OpCause::GcCopy).map(drop).unwrap(),
        &|f| {
            f.program(Ppn(chip1 + 1), &tag(3, 3), &[3; 16], 0, OpCause::HostData)
                .map(drop)
                .unwrap()
        },
    ];
    let copy = dir.path().join("killed.img");
    let mut copies = Vec::new();
    for step in steps {
        step(&mut f);
        std::fs::copy(&path, &copy).unwrap();
        copies.push(
            FileStore::open(&copy, &c.geometry, 16, &id())
                .unwrap()
                .snapshot(),
        );
        std::fs::remove_file(&copy).unwrap();
    }
    let log = f.take_log().unwrap();
    assert_eq!(log.issue_order(), vec![0, 1, 2, 3]);
    for (k, file) in copies.iter().enumerate() {
        let model = log.image_after_writes(base.as_ref(), k + 1, false);
        assert_same_image(
            file.as_ref(),
            model.as_ref(),
            &format!("after write {}", k + 1),
        );
    }
    // The first write alone (the commit record without its data) is a state no simulated
    // instant shows: by the time it completes, the data has completed too.
    let (late, early) = (log.ops[0].span, log.ops[1].span);
    assert!(early.end_ns < late.end_ns);
    let at_late = log.image_at(base.as_ref(), late.end_ns, false);
    assert_eq!(at_late.page_state(Ppn(chip1)), PageState::Programmed);
    assert_eq!(copies[0].page_state(Ppn(chip1)), PageState::Erased);
    assert_eq!(copies[0].page_state(Ppn(0)), PageState::Programmed);
    // Killed while writing the second: the file store marks the page torn before writing it.
    let torn_path = dir.path().join("torn.img");
    let mut store = FileStore::create(&torn_path, &c.geometry, 16, &id()).unwrap();
    store.write_page(Ppn(64), &tag(9, 1), &[9; 16]);
    store.write_page(Ppn(0), &metadata_page(), &[1; 16]);
    store.set_torn(Ppn(chip1));
    let torn = log.image_after_writes(base.as_ref(), 1, true);
    assert_same_image(&store, torn.as_ref(), "killed during write 2");
}
