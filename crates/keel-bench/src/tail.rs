//! Reading a file another process appends to (a node's log, a broker's
//! history), a piece at a time: each read returns what was appended since
//! the last one, and a torn last line waits for the rest.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// A file read incrementally from where the last read stopped.
pub struct Tail {
    path: PathBuf,
    /// Bytes already read.
    offset: u64,
    /// Read after the last complete line, waiting for its end.
    partial: Vec<u8>,
}

impl Tail {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            offset: 0,
            partial: Vec::new(),
        }
    }

    /// Appends every new byte to `buf`, torn last line included (a file
    /// that does not exist yet has nothing new).
    pub fn append_to(&mut self, buf: &mut Vec<u8>) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let before = buf.len();
        if f.read_to_end(buf).is_err() {
            buf.truncate(before);
            return;
        }
        self.offset += (buf.len() - before) as u64;
    }

    /// The complete non-empty lines appended since the last call.
    pub fn lines(&mut self) -> Vec<String> {
        let mut partial = std::mem::take(&mut self.partial);
        self.append_to(&mut partial);
        let end = partial
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |e| e + 1);
        self.partial = partial.split_off(end);
        String::from_utf8_lossy(&partial)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_line_is_returned_once_it_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut t = Tail::new(path.clone());
        assert!(t.lines().is_empty(), "no file yet");
        std::fs::write(&path, "one\ntw").unwrap();
        assert_eq!(t.lines(), ["one"]);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"o\n\nthree\n").unwrap();
        assert_eq!(t.lines(), ["two", "three"]);
        assert!(t.lines().is_empty());
    }
}
