//! Backups of the quorum's metadata: a self-describing file holding one
//! consistent image (`keel quorum snapshot save`), and the offline restore
//! that builds a new node's data dir from it (`keel quorum snapshot
//! restore`).
//!
//! The file is a header then the body, the image exactly as
//! [`MetadataImage::encode`] writes it. Header, all integers little-endian:
//!
//! | field | size |
//! |---|---|
//! | magic `KEELBAK\n` | 8 |
//! | format version ([`BACKUP_FORMAT_VERSION`]) | 2 |
//! | cluster id length, cluster id (UTF-8) | 2 + n |
//! | index of the last entry the image includes | 8 |
//! | its term and the node that led that term | 8 + 8 |
//! | image hash length, image hash (hex SHA-256, [`MetadataImage::hash`]) | 2 + n |
//! | voters length, voters at that index (`1@host:port,2@...`) | 2 + n |
//! | body length | 8 |
//! | CRC-32 of the body | 4 |
//! | CRC-32 of every header byte before this one | 4 |
//!
//! Reading checks all of it and decodes, validates and re-hashes the image;
//! anything off is a [`BackupError`] naming it. A restore writes nothing
//! before the file, the cluster id, the voters and the target dir have
//! all been checked, and builds the dir under a temporary name that is
//! renamed into place only once it opens as a node's storage with the
//! backup's image.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use keel_metadata::MetadataImage;
use openraft::{CommittedLeaderId, LogId, Membership, StoredMembership, Vote};

use crate::codec;
use crate::error::StorageOpenError;
use crate::open::{open_storage, sled_config};
use crate::state_machine::{StoredSnapshot, SNAPSHOT_KEY};
use crate::{KeelNode, NodeId};

/// First bytes of every backup file.
pub const BACKUP_MAGIC: &[u8; 8] = b"KEELBAK\n";

/// The backup file format this build writes and reads.
pub const BACKUP_FORMAT_VERSION: u16 = 1;

/// Key of the single record in the `vote` tree (as `log_store.rs` keeps it).
const VOTE_KEY: &[u8] = b"value";

/// Why a backup cannot be read or restored. Nothing is written when one is
/// returned.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The operating system refused a read or write.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or dir concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with [`BACKUP_MAGIC`].
    #[error("not a Keel backup file (its first bytes are not the backup magic)")]
    NotABackup,
    /// Written by a build with another backup format.
    #[error("backup format version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        /// The version in the file.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// The file ends before its header or body does.
    #[error("backup file is truncated: {0}")]
    Truncated(String),
    /// The header's own checksum or a field in it is wrong.
    #[error("backup header is corrupt: {0}")]
    CorruptHeader(String),
    /// More bytes follow the body than the header announces.
    #[error("backup file has {0} bytes after the body its header announces")]
    TrailingBytes(u64),
    /// The body's CRC-32 is not the header's.
    #[error("backup body is corrupt: its CRC-32 is {found:08x}, the header says {expected:08x}")]
    BodyChecksum {
        /// CRC-32 of the body as read.
        found: u32,
        /// CRC-32 in the header.
        expected: u32,
    },
    /// The body does not decode or validate as an image at the header's
    /// index.
    #[error("backup image is invalid: {0}")]
    BadImage(String),
    /// The decoded image's hash is not the header's.
    #[error("backup image hash {found} does not match the header's {expected}")]
    HashMismatch {
        /// Hash of the decoded image.
        found: String,
        /// Hash in the header.
        expected: String,
    },
    /// The backup was taken of another cluster than the one being built.
    #[error(
        "backup is of cluster '{found}', not '{expected}' (pass --allow-cluster-id-change to \
         restore it under another cluster id)"
    )]
    WrongCluster {
        /// Cluster id in the backup.
        found: String,
        /// Cluster id asked for.
        expected: String,
    },
    /// A restore builds a new node's data dir; it never writes over one.
    #[error("data dir {} is not empty: a restore only builds a new node's data dir", dir.display())]
    DataDirNotEmpty {
        /// The data dir asked for.
        dir: PathBuf,
    },
    /// The voters given do not make a membership for this node.
    #[error("invalid voters: {0}")]
    InvalidVoters(String),
    /// The built dir did not open as a node's storage (a bug or a disk
    /// fault; the dir was not put in place).
    #[error("the restored data dir does not open: {0}")]
    Storage(#[from] StorageOpenError),
    /// The built dir opened but does not hold the backup's image.
    #[error("the restored data dir does not hold the backup's image: {0}")]
    Mismatch(String),
}

impl BackupError {
    /// A stable name of the error's kind, for scripts and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Io { .. } => "io",
            Self::NotABackup => "not_a_backup",
            Self::UnsupportedVersion { .. } => "unsupported_version",
            Self::Truncated(_) => "truncated",
            Self::CorruptHeader(_) => "corrupt_header",
            Self::TrailingBytes(_) => "trailing_bytes",
            Self::BodyChecksum { .. } => "body_checksum",
            Self::BadImage(_) => "bad_image",
            Self::HashMismatch { .. } => "hash_mismatch",
            Self::WrongCluster { .. } => "wrong_cluster",
            Self::DataDirNotEmpty { .. } => "data_dir_not_empty",
            Self::InvalidVoters(_) => "invalid_voters",
            Self::Storage(_) => "storage",
            Self::Mismatch(_) => "mismatch",
        }
    }
}

/// What a backup file says about its image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupHeader {
    /// The cluster the image was taken from.
    pub cluster_id: String,
    /// Log index of the last entry the image includes.
    pub index: u64,
    /// Term of that entry.
    pub term: u64,
    /// The node that led `term` (with `term`, openraft's leader id of the
    /// entry: restored nodes need the whole log id).
    pub leader_node_id: u64,
    /// [`MetadataImage::hash`] of the image.
    pub image_hash: String,
    /// The voters of the membership in effect at `index`, as `--voters`
    /// takes them (`1@host:port,2@...`); informative, a restore's default.
    pub voters: String,
    /// Length of the body in bytes.
    pub body_len: u64,
    /// CRC-32 of the body.
    pub body_crc32: u32,
}

impl BackupHeader {
    /// The header of a file whose body is `body`.
    #[allow(clippy::too_many_arguments)]
    pub fn for_body(
        cluster_id: impl Into<String>,
        index: u64,
        term: u64,
        leader_node_id: u64,
        image_hash: impl Into<String>,
        voters: impl Into<String>,
        body: &[u8],
    ) -> Self {
        Self {
            cluster_id: cluster_id.into(),
            index,
            term,
            leader_node_id,
            image_hash: image_hash.into(),
            voters: voters.into(),
            body_len: body.len() as u64,
            body_crc32: crc32fast::hash(body),
        }
    }

    /// The header's bytes, checksum included.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + self.cluster_id.len());
        out.extend_from_slice(BACKUP_MAGIC);
        out.extend_from_slice(&BACKUP_FORMAT_VERSION.to_le_bytes());
        put_str(&mut out, &self.cluster_id);
        out.extend_from_slice(&self.index.to_le_bytes());
        out.extend_from_slice(&self.term.to_le_bytes());
        out.extend_from_slice(&self.leader_node_id.to_le_bytes());
        put_str(&mut out, &self.image_hash);
        put_str(&mut out, &self.voters);
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out.extend_from_slice(&self.body_crc32.to_le_bytes());
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }
}

/// A string field: u16 length, then the bytes (cut at 65,535 bytes; ids
/// and hashes are far shorter).
fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads a header field by field; running out is [`BackupError::Truncated`].
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], BackupError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.bytes.len());
        let Some(end) = end else {
            return Err(BackupError::Truncated(format!(
                "the header ends in its {what} (file of {} bytes)",
                self.bytes.len()
            )));
        };
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u16(&mut self, what: &str) -> Result<u16, BackupError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &str) -> Result<u32, BackupError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, BackupError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self, what: &str) -> Result<String, BackupError> {
        let n = self.u16(what)? as usize;
        let b = self.take(n, what)?;
        // Decoded as lossy: a flipped byte here is reported by the header
        // checksum, which names the problem better than UTF-8 would.
        Ok(String::from_utf8_lossy(b).into_owned())
    }
}

/// A backup whose every check passed.
#[derive(Debug)]
pub struct Backup {
    /// The header as read.
    pub header: BackupHeader,
    /// The decoded, validated image; its hash is the header's.
    pub image: MetadataImage,
    /// The body as read (the encoded image).
    pub body: Vec<u8>,
}

/// Parses and checks a whole backup file's bytes.
pub fn parse_backup(bytes: &[u8]) -> Result<Backup, BackupError> {
    let mut r = Reader { bytes, at: 0 };
    if bytes.len() < BACKUP_MAGIC.len() {
        if BACKUP_MAGIC.starts_with(bytes) && !bytes.is_empty() {
            return Err(BackupError::Truncated(format!(
                "only {} bytes",
                bytes.len()
            )));
        }
        return Err(BackupError::NotABackup);
    }
    if r.take(BACKUP_MAGIC.len(), "magic")? != BACKUP_MAGIC {
        return Err(BackupError::NotABackup);
    }
    let version = r.u16("format version")?;
    if version != BACKUP_FORMAT_VERSION {
        return Err(BackupError::UnsupportedVersion {
            found: version,
            supported: BACKUP_FORMAT_VERSION,
        });
    }
    let cluster_id = r.string("cluster id")?;
    let index = r.u64("index")?;
    let term = r.u64("term")?;
    let leader_node_id = r.u64("leader node id")?;
    let image_hash = r.string("image hash")?;
    let voters = r.string("voters")?;
    let body_len = r.u64("body length")?;
    let body_crc32 = r.u32("body CRC-32")?;
    let header_end = r.at;
    let header_crc = r.u32("header CRC-32")?;
    let found_crc = crc32fast::hash(&bytes[..header_end]);
    if found_crc != header_crc {
        return Err(BackupError::CorruptHeader(format!(
            "its CRC-32 is {found_crc:08x}, the file says {header_crc:08x}"
        )));
    }
    let header = BackupHeader {
        cluster_id,
        index,
        term,
        leader_node_id,
        image_hash,
        voters,
        body_len,
        body_crc32,
    };
    let rest = &bytes[r.at..];
    let have = rest.len() as u64;
    if have < body_len {
        return Err(BackupError::Truncated(format!(
            "the body has {have} of its {body_len} bytes"
        )));
    }
    if have > body_len {
        return Err(BackupError::TrailingBytes(have - body_len));
    }
    let found = crc32fast::hash(rest);
    if found != body_crc32 {
        return Err(BackupError::BodyChecksum {
            found,
            expected: body_crc32,
        });
    }
    let image = MetadataImage::decode(rest).map_err(|e| BackupError::BadImage(e.to_string()))?;
    image
        .validate()
        .map_err(|e| BackupError::BadImage(e.to_string()))?;
    if image.offset() != header.index {
        return Err(BackupError::BadImage(format!(
            "the image is at index {} but the header says {}",
            image.offset(),
            header.index
        )));
    }
    let hash = image.hash();
    if hash != header.image_hash {
        return Err(BackupError::HashMismatch {
            found: hash,
            expected: header.image_hash,
        });
    }
    Ok(Backup {
        header,
        image,
        body: rest.to_vec(),
    })
}

/// Reads and checks the backup file at `path`.
pub fn read_backup_file(path: &Path) -> Result<Backup, BackupError> {
    let bytes = std::fs::read(path).map_err(|source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_backup(&bytes)
}

/// Writes a backup file at `path` atomically: a temporary file next to it,
/// written, fsynced, renamed over `path`, and the directory fsynced. A
/// reader sees the old file or the whole new one, never part of it.
pub fn write_backup_file(
    path: &Path,
    header: &BackupHeader,
    body: &[u8],
) -> Result<(), BackupError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| BackupError::Io { path: p, source }
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "backup".to_string());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(&header.to_bytes()).map_err(io(&tmp))?;
        f.write_all(body).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io(path))?;
        sync_dir(&dir)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Fsyncs a directory, so a rename in it survives a crash.
fn sync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| BackupError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Where and as whom a backup is restored.
#[derive(Clone, Debug)]
pub struct RestoreTarget {
    /// The new node's data dir (absent or empty).
    pub data_dir: PathBuf,
    /// The cluster the new node belongs to.
    pub cluster_id: String,
    /// Restore even when `cluster_id` is not the backup's.
    pub allow_cluster_id_change: bool,
    /// The new node's id.
    pub node_id: NodeId,
    /// Every voter of the new quorum (`node_id` among them) and its
    /// `host:port`: the membership the restored snapshot carries.
    pub voters: BTreeMap<NodeId, String>,
}

/// What a restore built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The log index the new node starts at.
    pub index: u64,
    /// The image hash the new node serves (the backup's).
    pub image_hash: String,
    /// The directory id drawn for the new data dir.
    pub directory_id: String,
}

/// Builds `target.data_dir` as the data dir of node `target.node_id` of a
/// new quorum whose state is the backup's image: its installed snapshot is
/// the image at the backup's log id, with the given voters as membership,
/// and its vote is at the backup's term, so the new quorum's first
/// election is in a later term and no node takes the dir for a fresh one
/// to bootstrap. Offline: nothing here talks to the network.
pub fn restore_backup(backup: &Backup, target: &RestoreTarget) -> Result<Restored, BackupError> {
    let h = &backup.header;
    if h.cluster_id != target.cluster_id && !target.allow_cluster_id_change {
        return Err(BackupError::WrongCluster {
            found: h.cluster_id.clone(),
            expected: target.cluster_id.clone(),
        });
    }
    check_voters(target)?;
    let dir = &target.data_dir;
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(BackupError::DataDirNotEmpty { dir: dir.clone() });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(BackupError::DataDirNotEmpty { dir: dir.clone() });
        }
        Err(source) => {
            return Err(BackupError::Io {
                path: dir.clone(),
                source,
            })
        }
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|source| BackupError::Io {
        path: parent.clone(),
        source,
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "data".to_string());
    let staging = parent.join(format!(".{name}.restoring-{}", std::process::id()));
    // A leftover of this very process id can only be an earlier failed
    // attempt's.
    let _ = std::fs::remove_dir_all(&staging);
    let built = build_dir(backup, target, &staging).and_then(|restored| {
        std::fs::rename(&staging, dir).map_err(|source| BackupError::Io {
            path: dir.clone(),
            source,
        })?;
        sync_dir(&parent)?;
        Ok(restored)
    });
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    built
}

/// The voters must be non-empty, name this node, and have addresses.
fn check_voters(target: &RestoreTarget) -> Result<(), BackupError> {
    if target.voters.is_empty() {
        return Err(BackupError::InvalidVoters("no voters given".into()));
    }
    if !target.voters.contains_key(&target.node_id) {
        return Err(BackupError::InvalidVoters(format!(
            "node {} is not among the voters {:?}",
            target.node_id,
            target.voters.keys().collect::<Vec<_>>()
        )));
    }
    if let Some((id, _)) = target.voters.iter().find(|(_, a)| a.trim().is_empty()) {
        return Err(BackupError::InvalidVoters(format!(
            "voter {id} has no address"
        )));
    }
    Ok(())
}

/// Formats `staging` as the node's storage holding the backup, and checks
/// it opens with the backup's image.
fn build_dir(
    backup: &Backup,
    target: &RestoreTarget,
    staging: &Path,
) -> Result<Restored, BackupError> {
    let h = &backup.header;
    let corrupt = |what: String| BackupError::Mismatch(what);
    // Formats and stamps the dir exactly as a first start does.
    let directory_id = {
        let (log, _sm) = open_storage(staging, &target.cluster_id, target.node_id)?;
        log.directory_id().to_string()
    };
    let log_id = LogId::new(CommittedLeaderId::new(h.term, h.leader_node_id), h.index);
    let ids: BTreeSet<NodeId> = target.voters.keys().copied().collect();
    let nodes: BTreeMap<NodeId, KeelNode> = target
        .voters
        .iter()
        .map(|(id, addr)| (*id, KeelNode::new(addr.clone())))
        .collect();
    let membership = StoredMembership::new(Some(log_id), Membership::new(vec![ids], nodes));
    let snapshot = StoredSnapshot::restored(
        backup.body.clone(),
        log_id,
        membership,
        format!("restored-{}-{}", h.term, h.index),
    )
    .map_err(|e| corrupt(e.to_string()))?;
    // This node's own vote at the backup's term: elections of the new
    // quorum start above every term of the log the image ends.
    let vote: Vote<NodeId> = Vote::new(h.term, target.node_id);
    {
        let raft_dir = staging.join("raft");
        let db = sled_config(&raft_dir)
            .open()
            .map_err(|e| corrupt(format!("reopening {}: {e}", raft_dir.display())))?;
        let write = |tree: &str, key: &[u8], bytes: Vec<u8>| {
            db.open_tree(tree)
                .and_then(|t| t.insert(key, bytes))
                .map(|_| ())
                .map_err(|e| corrupt(format!("writing the {tree} tree: {e}")))
        };
        write(
            "snapshot",
            SNAPSHOT_KEY,
            codec::encode(&snapshot).map_err(|e| corrupt(e.to_string()))?,
        )?;
        write(
            "vote",
            VOTE_KEY,
            codec::encode(&vote).map_err(|e| corrupt(e.to_string()))?,
        )?;
        db.flush()
            .map_err(|e| corrupt(format!("flushing {}: {e}", raft_dir.display())))?;
    }
    // Read back as a starting node would.
    let (_log, sm) = open_storage(staging, &target.cluster_id, target.node_id)?;
    let state = sm.subscribe().borrow().clone();
    if state.last_applied != Some(log_id) {
        return Err(corrupt(format!(
            "it starts at {:?}, not {log_id}",
            state.last_applied
        )));
    }
    let hash = state.image.hash();
    if hash != h.image_hash {
        return Err(corrupt(format!(
            "its image hash is {hash}, the backup's {}",
            h.image_hash
        )));
    }
    Ok(Restored {
        index: h.index,
        image_hash: hash,
        directory_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backup file of an empty image at index 7, term 2.
    fn file() -> (Vec<u8>, String) {
        let mut image = MetadataImage::default();
        image.advance_offset(7);
        let body = image.encode();
        let hash = image.hash();
        let header = BackupHeader::for_body(
            "c1",
            7,
            2,
            1,
            hash.clone(),
            "1@127.0.0.1:1,2@127.0.0.2:1,3@127.0.0.3:1",
            &body,
        );
        let mut bytes = header.to_bytes();
        bytes.extend_from_slice(&body);
        (bytes, hash)
    }

    fn target(dir: &Path, cluster_id: &str) -> RestoreTarget {
        RestoreTarget {
            data_dir: dir.to_path_buf(),
            cluster_id: cluster_id.to_string(),
            allow_cluster_id_change: false,
            node_id: 2,
            voters: [(1, "127.0.0.1:1"), (2, "127.0.0.2:1"), (3, "127.0.0.3:1")]
                .into_iter()
                .map(|(i, a)| (i, a.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_written_backup_reads_back_with_its_header() {
        let (bytes, hash) = file();
        let b = parse_backup(&bytes).unwrap();
        assert_eq!(
            (b.header.cluster_id.as_str(), b.header.index, b.header.term),
            ("c1", 7, 2)
        );
        assert_eq!(b.image.hash(), hash);
    }

    #[test]
    fn every_flipped_byte_and_every_truncation_is_refused() {
        let (bytes, _) = file();
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(parse_backup(&bad).is_err(), "byte {i} flipped was accepted");
            assert!(
                parse_backup(&bytes[..i]).is_err(),
                "truncated to {i} bytes was accepted"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            parse_backup(&longer),
            Err(BackupError::TrailingBytes(1))
        ));
        assert!(matches!(
            parse_backup(&bytes[..bytes.len() - 1]),
            Err(BackupError::Truncated(_))
        ));
        assert!(matches!(
            parse_backup(b"hello, world"),
            Err(BackupError::NotABackup)
        ));
    }

    #[test]
    fn a_restored_dir_opens_at_the_backups_index_with_its_image() {
        let (bytes, hash) = file();
        let b = parse_backup(&bytes).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node2");
        let r = restore_backup(&b, &target(&dir, "c1")).unwrap();
        assert_eq!((r.index, r.image_hash.as_str()), (7, hash.as_str()));
        let (_log, sm) = open_storage(&dir, "c1", 2).unwrap();
        let state = sm.subscribe().borrow().clone();
        assert_eq!(state.last_applied.map(|l| l.index), Some(7));
        assert_eq!(state.image.hash(), hash);
        let voters: Vec<u64> = state.membership.membership().voter_ids().collect();
        assert_eq!(voters, vec![1, 2, 3]);
        // Only the dir itself is left in the parent: no staging leftovers.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_restore_refuses_another_cluster_and_a_used_dir_and_writes_nothing() {
        let (bytes, _) = file();
        let b = parse_backup(&bytes).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("node2");
        assert!(matches!(
            restore_backup(&b, &target(&dir, "other")),
            Err(BackupError::WrongCluster { .. })
        ));
        assert!(!dir.exists());
        let mut changed = target(&dir, "other");
        changed.allow_cluster_id_change = true;
        restore_backup(&b, &changed).unwrap();
        assert!(matches!(
            restore_backup(&b, &changed),
            Err(BackupError::DataDirNotEmpty { .. })
        ));
        let mut stranger = target(&tmp.path().join("node9"), "c1");
        stranger.node_id = 9;
        assert!(matches!(
            restore_backup(&b, &stranger),
            Err(BackupError::InvalidVoters(_))
        ));
        assert!(!tmp.path().join("node9").exists());
    }

    #[test]
    fn a_backup_file_is_written_whole() {
        let (bytes, _) = file();
        let b = parse_backup(&bytes).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("meta.keelbak");
        write_backup_file(&path, &b.header, &b.body).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
