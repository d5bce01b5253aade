#![allow(dead_code)]
use flash::{DeviceConfig, Geometry};
use ftl::DesignOptions;
use nvmfs::ssd::{create_ssd, open_ssd};
use nvmfs::{Nvmfs, NvmfsParams};
use std::path::{Path, PathBuf};

/// A small SSD: 2 ch x 2 chips x `blocks` blocks x 32 pages x 4 KB.
pub fn config(blocks: u32) -> DeviceConfig {
    let mut c = DeviceConfig::preset("small").unwrap();
    c.geometry = Geometry {
        blocks_per_chip: blocks,
        ..c.geometry
    };
    c
}

pub struct Env {
    pub dir: tempfile::TempDir,
    pub config: DeviceConfig,
}

impl Env {
    pub fn new(blocks: u32) -> Env {
        Env {
            dir: tempfile::tempdir().unwrap(),
            config: config(blocks),
        }
    }
    pub fn nvram(&self) -> PathBuf {
        self.dir.path().join("nvram.img")
    }
    pub fn ssd(&self) -> PathBuf {
        self.dir.path().join("ssd.img")
    }
    pub fn create(&self, nvram_bytes: u64, params: NvmfsParams) -> Nvmfs {
        let dev = create_ssd(
            &self.ssd(),
            &self.config,
            &dftl::spec(),
            &DesignOptions::default(),
        )
        .unwrap();
        let mut fs = Nvmfs::create(&self.nvram(), nvram_bytes, dev, params).unwrap();
        fs.set_clock(|| 7);
        fs
    }
    pub fn open(&self, params: NvmfsParams) -> Nvmfs {
        let dev = open_ssd(
            &self.ssd(),
            &self.config,
            &dftl::spec(),
            &DesignOptions::default(),
        )
        .unwrap();
        let mut fs = Nvmfs::open(&self.nvram(), dev, params).unwrap();
        fs.set_clock(|| 7);
        fs
    }
}

pub fn read_all(fs: &mut Nvmfs, ino: u32) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    assert_eq!(n as u64, size);
    buf
}

pub fn _unused(_: &Path) {}
