//! `$fileReceive`: input written to a file instead of being matched. An action starts it
//! ([`crate::Cx::file_receive`]); the machine feeds it the input that follows and puts the file
//! in place once it is complete, or removes it if the connection ends first.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;

/// A file being received: written to `PATH.part`, renamed to `PATH` once complete.
pub(crate) struct Receive {
    file: File,
    pub(crate) part: PathBuf,
    pub(crate) target: PathBuf,
    /// Bytes still to come; `None`: until the peer finishes sending.
    pub(crate) remaining: Option<u64>,
    pub(crate) received: u64,
}

impl Receive {
    /// Starts receiving `len` bytes (all until the peer finishes, without `len`) into `path`:
    /// creates `PATH.part`, so a path that cannot be written is an error at once.
    pub(crate) fn start(path: &str, len: Option<u64>) -> io::Result<Receive> {
        let target = PathBuf::from(path);
        let mut part = target.clone().into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        let file = File::create(&part)?;
        Ok(Receive {
            file,
            part,
            target,
            remaining: len,
            received: 0,
        })
    }

    /// Writes what of `data` belongs to the file; returns how many bytes that was.
    pub(crate) fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let take = match self.remaining {
            Some(n) => data.len().min(usize::try_from(n).unwrap_or(usize::MAX)),
            None => data.len(),
        };
        if take > 0 {
            self.file.write_all(&data[..take])?;
            self.received += take as u64;
            if let Some(n) = &mut self.remaining {
                *n -= take as u64;
            }
        }
        Ok(take)
    }

    /// Whether the file is complete: the length reached, or, without a length, the peer
    /// finished sending (`eof`).
    pub(crate) fn complete(&self, eof: bool) -> bool {
        match self.remaining {
            Some(n) => n == 0,
            None => eof,
        }
    }

    /// Puts the complete file at its path.
    pub(crate) fn finish(&self) -> io::Result<()> {
        std::fs::rename(&self.part, &self.target)
    }

    /// Removes what was received of a file that will not be complete.
    pub(crate) fn abandon(self) {
        drop(self.file);
        let _ = std::fs::remove_file(&self.part);
    }
}
