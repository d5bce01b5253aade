//! `nbdfuse DIR URI`: an NBD export as the file `DIR/nbd`, the first step of the stack (and,
//! alone, a way to read and write the export as a file).

use super::error::{KernelStackError, Result};
use super::tools::{run_within, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long `nbdfuse` may take to connect and show its file (a loaded machine, a server
/// recovering its image).
const COME_UP: Duration = Duration::from_secs(30);

/// `nbdfuse` serving an NBD export as the file [`file`](Self::file); its output goes to
/// `DIR.log`. Dropped: `fusermount3 -u`, up to 10 s for `nbdfuse` to exit, then it is killed
/// and the mount detached lazily.
pub struct Nbdfuse {
    child: Option<Child>,
    dir: PathBuf,
}

impl Nbdfuse {
    /// Starts `nbdfuse` on `uri` (`nbd+unix:///?socket=PATH`, `nbd://HOST:PORT`) at `dir`
    /// (made if missing) and waits until its file shows the export's size.
    pub fn start(dir: &Path, uri: &str) -> Result<Nbdfuse> {
        std::fs::create_dir_all(dir)?;
        let log = dir.with_extension("log");
        let child = Command::new("nbdfuse")
            .arg(dir)
            .arg(uri)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| KernelStackError::Command {
                command: "nbdfuse".into(),
                reason: e.to_string(),
            })?;
        let mut fuse = Nbdfuse {
            child: Some(child),
            dir: dir.to_path_buf(),
        };
        let file = fuse.file();
        let up = || std::fs::metadata(&file).is_ok_and(|m| m.len() > 0);
        let pause = Duration::from_millis(25);
        let tries = (COME_UP.as_millis() / pause.as_millis()) as u32;
        // An nbdfuse that exited (no server there) will not come up: no need to wait for it.
        wait_for(tries, pause, || up() || fuse.exited());
        if !up() {
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(KernelStackError::Command {
                command: format!("nbdfuse {} {uri}", dir.display()),
                reason: format!("did not come up in {COME_UP:?}: {}", output.trim()),
            });
        }
        Ok(fuse)
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The export as a file.
    pub fn file(&self) -> PathBuf {
        self.dir.join("nbd")
    }
}

impl Nbdfuse {
    /// `fusermount3 FLAGS DIR`, up to 20 s.
    fn fusermount(&self, flags: &str) {
        let _ = run_within(
            Command::new("fusermount3").arg(flags).arg(&self.dir),
            Some(20),
        );
    }
}

impl Drop for Nbdfuse {
    fn drop(&mut self) {
        self.fusermount("-u");
        if !wait_for(200, Duration::from_millis(50), || self.exited()) {
            if let Some(c) = self.child.as_mut() {
                let _ = c.kill();
            }
            self.fusermount("-uz");
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}
