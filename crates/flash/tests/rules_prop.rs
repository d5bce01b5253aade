//! Property: whatever sequence of operations is attempted, the device accepts exactly the legal
//! ones, and every page reads back what was last programmed into it since its block's erase.

use flash::{
    BlockId, Content, ContentTag, DeviceConfig, Flash, FlashError, OpCause, Ppn, ReadStatus,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Program(u32),
    Erase(u32),
    Read(u32),
}

fn op(pages: u32, blocks: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..pages).prop_map(Op::Program),
        1 => (0..blocks).prop_map(Op::Erase),
        2 => (0..pages).prop_map(Op::Read),
    ]
}

proptest! {
    #[test]
    fn model_agrees_with_device(ops in proptest::collection::vec(op(4096, 128), 1..400), tag_only in any::<bool>()) {
        let c = DeviceConfig::preset("small").unwrap();
        let g = c.geometry.clone();
        let mut f = Flash::in_memory(c, 16, tag_only);
        let mut model: Vec<Option<u64>> = vec![None; g.pages() as usize];
        let mut wp = vec![0u32; g.blocks() as usize];
        let mut oob = [0u8; 16];
        for (i, o) in ops.into_iter().enumerate() {
            match o {
                Op::Program(p) => {
                    let b = g.block_of(Ppn(p));
                    let off = g.page_in_block(Ppn(p));
                    let r = f.program(Ppn(p), &Content::Tag(ContentTag { lpn: p, write: i as u64 }), &[i as u8], 0, OpCause::HostData);
                    if model[p as usize].is_some() {
                        prop_assert_eq!(r, Err(FlashError::ProgramNotErased { ppn: Ppn(p) }));
                    } else if off < wp[b.0 as usize] {
                        prop_assert_eq!(r, Err(FlashError::OutOfOrderProgram { ppn: Ppn(p), next: wp[b.0 as usize] }));
                    } else {
                        prop_assert!(r.is_ok());
                        model[p as usize] = Some(i as u64);
                        wp[b.0 as usize] = off + 1;
                    }
                }
                Op::Erase(b) => {
                    f.erase(BlockId(b), 0, OpCause::GcCopy).unwrap();
                    let first = g.first_page(BlockId(b)).0 as usize;
                    model[first..first + g.pages_per_block as usize].fill(None);
                    wp[b as usize] = 0;
                }
                Op::Read(p) => {
                    let (status, _) = f.read(Ppn(p), &mut oob, 0, OpCause::HostData).unwrap();
                    match model[p as usize] {
                        None => prop_assert_eq!(status, ReadStatus::Erased),
                        Some(w) => {
                            let ReadStatus::Data(d) = status else { return Err(TestCaseError::fail("programmed page unreadable")) };
                            prop_assert_eq!(d.tag(), Some(ContentTag { lpn: p, write: w }));
                            prop_assert_eq!(oob[0], w as u8);
                        }
                    }
                }
            }
        }
    }
}
