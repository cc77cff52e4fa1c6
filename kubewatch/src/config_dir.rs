//! `--configDir`: every `*.yaml`, `*.yml` and `*.json` below a directory,
//! multi-document, read into typed objects and watched for changes.
//!
//! A document that does not parse is reported with its file, document index
//! and the parser's message, and the last good version of that document
//! stays in force; the rest of the directory loads. A YAML syntax error
//! ends the readable part of a file, so every document from there on keeps
//! its last good version: a half-written file never deletes what it held.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use istiod_config::manifest::{
    DEFAULT_MAX_DOCUMENTS, Object, ObjectRef, parse_file_limited, parse_split_as, split_documents,
};
use istiod_config::objects::Objects;

/// A document that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: document {index}: {message}", file.display())]
pub struct DocError {
    /// The file.
    pub file: PathBuf,
    /// 0-based document index in the file.
    pub index: usize,
    /// What was wrong, with the parser's location or the field path.
    pub message: String,
}

/// Why the directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not a readable directory.
    #[error("cannot read --configDir {}: {source}", dir.display())]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The directory cannot be watched.
    #[error("cannot watch --configDir {}: {message}", dir.display())]
    Watch {
        /// The directory.
        dir: PathBuf,
        /// What the watcher said.
        message: String,
    },
}

/// The result of reading a directory.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Objects in force (the last good version of each document).
    pub objects: Objects,
    /// The objects that differ from the previous read (added, changed or
    /// removed), found by comparing only the documents of files read anew.
    pub changed: Vec<ObjectRef>,
    /// Documents rejected in this read.
    pub errors: Vec<DocError>,
    /// Documents of kinds not read yet.
    pub skipped: usize,
}

/// What `--configDir` reads at most, so that a careless or hostile file
/// costs memory in proportion to what it may legitimately hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file read (`ISTIOD_RS_CONFIG_MAX_FILE_BYTES`, 32 MiB; the
    /// API server's objects are at most 1.5 MiB each).
    pub max_file_bytes: u64,
    /// Most documents read from one file (`ISTIOD_RS_CONFIG_MAX_DOCUMENTS`,
    /// 10,000); the documents after the limit keep their last good
    /// version, as after a syntax error.
    pub max_documents: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_file_bytes: 32 << 20, max_documents: DEFAULT_MAX_DOCUMENTS }
    }
}

fn is_manifest(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
}

/// The manifests below `dir`. Symbolic links are followed (a Kubernetes
/// ConfigMap mount links each key through `..data`), but every directory is
/// read once, by device and inode, so a link loop (`a -> .`) ends the walk
/// instead of multiplying it. Hidden entries are skipped: editors' swap
/// files, and the `..data` / `..<timestamp>` directories of a ConfigMap
/// mount, whose files the top-level links already reach. A manifest name
/// that is not a regular file (a FIFO, a device, a socket) is reported and
/// never opened.
fn files(
    dir: &Path,
    out: &mut Vec<PathBuf>,
    skipped: &mut Vec<DocError>,
    seen: &mut std::collections::HashSet<(u64, u64)>,
) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(dir)?;
    if !seen.insert((m.dev(), m.ino())) {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // Follows links; a dangling link is skipped like a missing file.
        let Ok(m) = std::fs::metadata(&path) else { continue };
        if m.is_dir() {
            // A subdirectory that vanished or cannot be read is skipped;
            // only the top directory must be readable.
            if let Err(e) = files(&path, out, skipped, seen) {
                skipped.push(DocError { file: path, index: 0, message: format!("cannot read directory: {e}") });
            }
        } else if is_manifest(&path) {
            if m.is_file() {
                out.push(path);
            } else {
                skipped.push(DocError {
                    file: path,
                    index: 0,
                    message: "not a regular file (a FIFO, device or socket): skipped".into(),
                });
            }
        }
    }
    Ok(())
}

/// Reads a manifest: opened without blocking (a FIFO swapped in after the
/// walk does not hang the reader), checked to be a regular file within the
/// size limit, and read no further than the limit.
fn read_manifest(path: &Path, limits: &Limits) -> std::io::Result<String> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Err(std::io::Error::other("not a regular file (a FIFO, device or socket): skipped"));
    }
    let too_big = |n: u64| {
        std::io::Error::other(format!(
            "file is {n} bytes, over the limit of {} (ISTIOD_RS_CONFIG_MAX_FILE_BYTES): not read",
            limits.max_file_bytes
        ))
    };
    if m.len() > limits.max_file_bytes {
        return Err(too_big(m.len()));
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    f.take(limits.max_file_bytes + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limits.max_file_bytes {
        return Err(too_big(buf.len() as u64));
    }
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// What identifies a file's content without reading it: size, change
/// time, modification time and inode (a rename-into-place changes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: Option<std::time::SystemTime>,
    ctime: (i64, i64),
    ino: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp { len: m.len(), mtime: m.modified().ok(), ctime: (m.ctime(), m.ctime_nsec()), ino: m.ino() })
}

/// How long before a parse a file must have been last written for its
/// stamp to be trusted: file times are coarse (a kernel tick), so a write
/// within the same tick as an earlier one may leave the stamp unchanged.
const RACY: std::time::Duration = std::time::Duration::from_millis(50);

/// A config directory and the last good version of each of its documents.
#[derive(Debug)]
pub struct ConfigDir {
    dir: PathBuf,
    limits: Limits,
    /// Each file's last good documents by index: a reload replaces only
    /// the files read anew, so an unchanged file costs no copy, and in a
    /// file read anew a document whose text was read before is shared,
    /// not copied.
    last_good: BTreeMap<PathBuf, BTreeMap<usize, Arc<Object>>>,
    /// Each file's last parse: a reload re-reads only the files that
    /// changed, and re-parses only those whose text changed.
    parsed: std::collections::HashMap<PathBuf, Parsed>,
    /// Hashes documents' texts (keys drawn per process: a file cannot be
    /// written to make two documents' hashes meet).
    hasher: std::hash::RandomState,
    /// Documents parsed so far (not those taken unchanged; a file read a
    /// document at a time and then, failing that, whole counts both).
    documents_parsed: std::cell::Cell<u64>,
}

/// A file's parse, with what tells whether it still holds.
#[derive(Debug)]
struct Parsed {
    /// The file's stamp when it was read.
    stamp: Stamp,
    /// The stamp can be trusted: the file was last written well before it
    /// was read (else a later write within the same clock tick could leave
    /// the stamp unchanged, and the text is compared instead).
    trusted: bool,
    /// A hash of the text parsed.
    text: u64,
    /// The documents it rejected, reported again on every read while the
    /// file stays as it is.
    errors: Vec<DocError>,
    /// The index of each document that was read (not rejected) by the hash
    /// of its text, where the file could be read a document at a time: a
    /// document whose text comes again is taken from the documents in force
    /// instead of parsed (an edit of one document of a hundred parses one).
    docs: std::collections::HashMap<u64, usize>,
}

/// What reading a file found.
enum Read {
    /// The same as the last parse: its documents in force stand.
    Unchanged,
    /// Read anew: its documents in order (up to a syntax error), and the
    /// index of the document where a syntax error ended the file.
    Fresh(Vec<Result<Option<Doc>, String>>, Option<(usize, String)>),
}

/// A document of a file read anew.
enum Doc {
    /// Parsed (shared from here on, as what is in force is).
    Read(Arc<Object>),
    /// Its text was read before: neither parsed nor copied, it is the
    /// document in force at this index.
    InForce(usize),
}

fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

impl ConfigDir {
    /// A source for `dir` (nothing read yet).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            limits: Limits::default(),
            last_good: BTreeMap::new(),
            parsed: std::collections::HashMap::new(),
            hasher: std::hash::RandomState::new(),
            documents_parsed: std::cell::Cell::new(0),
        }
    }

    /// Reads within `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// `file`'s documents if it changed since the last parse: unchanged
    /// when its stamp is (and can be trusted), or when its text is.
    fn parse(&mut self, file: &Path) -> std::io::Result<Read> {
        let before = stamp(file);
        if let (Some(st), Some(cached)) = (before, self.parsed.get(file))
            && cached.trusted
            && st == cached.stamp
        {
            return Ok(Read::Unchanged);
        }
        let started = std::time::SystemTime::now();
        let text = read_manifest(file, &self.limits)?;
        let hash = text_hash(&text);
        let after = stamp(file);
        // Trust the stamp next time only if the file did not change while
        // it was read and was last written well before.
        let trusted = matches!((before, after), (Some(a), Some(b))
            if a == b && a.mtime.is_some_and(|m| started.duration_since(m).is_ok_and(|d| d > RACY)));
        // The same text as the last parse (a stamp not trusted, or touched
        // without a change): that parse stands, and nothing changed.
        if let Some(cached) = self.parsed.get_mut(file).filter(|c| c.text == hash) {
            if let Some(st) = before.filter(|_| before == after) {
                (cached.stamp, cached.trusted) = (st, trusted);
            } else {
                cached.trusted = false;
            }
            return Ok(Read::Unchanged);
        }
        let (read, by_text) = self.parse_documents(file, &text);
        match before.filter(|_| before == after) {
            Some(st) => {
                let parsed = Parsed { stamp: st, trusted, text: hash, errors: Vec::new(), docs: by_text };
                self.parsed.insert(file.to_owned(), parsed);
            }
            None => {
                self.parsed.remove(file);
            }
        }
        Ok(read)
    }

    /// `text`'s documents ([`Read::Fresh`]), a document at a time where the
    /// file can be read so: one whose text was read from `file` last time
    /// is the document in force at the index it was read from. With the
    /// read documents' indexes by the hash of their text (empty where the
    /// file was read whole).
    fn parse_documents(&self, file: &Path, text: &str) -> (Read, std::collections::HashMap<u64, usize>) {
        use std::hash::BuildHasher as _;
        let whole = || {
            let read = parse_file_limited(text, self.limits.max_documents);
            self.documents_parsed.set(self.documents_parsed.get() + read.docs.len() as u64);
            let docs = read.docs.into_iter().map(|d| d.map(|o| o.map(|o| Doc::Read(Arc::new(o))))).collect();
            (Read::Fresh(docs, read.syntax_error), Default::default())
        };
        let Some(pieces) = split_documents(text).filter(|p| p.len() > 1) else { return whole() };
        let hashes: Vec<u64> = pieces.iter().map(|p| self.hasher.hash_one(p)).collect();
        let before = self.parsed.get(file).map(|p| &p.docs);
        let in_force = self.last_good.get(file);
        let known = |index: usize, _: &str| {
            let Some(old) = before.and_then(|b| b.get(&hashes[index])) else {
                self.documents_parsed.set(self.documents_parsed.get() + 1);
                return None;
            };
            // Read last time, so what is in force at its index is what it
            // read (nothing for an empty document), and `reload` shares it.
            Some(in_force.is_some_and(|m| m.contains_key(old)).then_some(Doc::InForce(*old)))
        };
        let read = |o| Doc::Read(Arc::new(o));
        let Some(docs) = parse_split_as(&pieces, self.limits.max_documents, known, read) else { return whole() };
        let by_text = hashes.iter().enumerate().filter(|(i, _)| docs[*i].is_ok()).map(|(i, h)| (*h, i)).collect();
        (Read::Fresh(docs, None), by_text)
    }

    /// Documents parsed so far: a document whose text was read before is
    /// not parsed again.
    pub fn documents_parsed(&self) -> u64 {
        self.documents_parsed.get()
    }

    /// Reads the directory again and returns what is in force.
    pub fn reload(&mut self) -> Result<Loaded, LoadError> {
        let mut paths = Vec::new();
        let mut errors = Vec::new();
        files(&self.dir, &mut paths, &mut errors, &mut Default::default())
            .map_err(|source| LoadError::Dir { dir: self.dir.clone(), source })?;
        paths.sort();
        self.parsed.retain(|f, _| paths.binary_search(f).is_ok());
        let mut changed = std::collections::BTreeSet::new();
        // A file gone takes its objects with it; a manifest that became
        // something else than a regular file (reported by `files`) keeps
        // what it held. Kinds not read change nothing served, so a
        // ConfigMap edit does not cost a rebuild.
        let gone: Vec<PathBuf> = self
            .last_good
            .keys()
            .filter(|f| paths.binary_search(f).is_err() && !errors.iter().any(|e: &DocError| &e.file == *f))
            .cloned()
            .collect();
        for file in gone {
            for o in self.last_good.remove(&file).unwrap_or_default().values() {
                if !matches!(**o, Object::Skipped(_)) {
                    changed.insert(ObjectRef::of(o));
                }
            }
        }
        for file in paths {
            let (docs, syntax_error) = match self.parse(&file) {
                Ok(Read::Fresh(docs, syntax_error)) => (docs, syntax_error),
                Ok(Read::Unchanged) => {
                    errors.extend(self.parsed.get(&file).map(|p| p.errors.clone()).unwrap_or_default());
                    continue;
                }
                Err(e) => {
                    // Unreadable now (e.g. replaced mid-read): keep it as it was.
                    errors.push(DocError { file: file.clone(), index: 0, message: e.to_string() });
                    continue;
                }
            };
            let old = self.last_good.remove(&file).unwrap_or_default();
            let mut new = BTreeMap::new();
            let mut rejected = Vec::new();
            for (index, doc) in docs.into_iter().enumerate() {
                match doc {
                    // A text read before: the document in force it read.
                    Ok(Some(Doc::InForce(at))) => {
                        // (In force when the text was found: `old` is it.)
                        debug_assert!(old.contains_key(&at), "document {index} taken from {at}, not in force");
                        new.extend(old.get(&at).map(|o| (index, o.clone())));
                    }
                    Ok(Some(Doc::Read(obj))) => {
                        new.insert(index, obj);
                    }
                    Ok(None) => {}
                    Err(message) => {
                        rejected.push(DocError { file: file.clone(), index, message });
                        new.extend(old.get(&index).map(|o| (index, o.clone())));
                    }
                }
            }
            // A syntax error ends the readable part: every document from
            // there on keeps its last good version.
            if let Some((index, message)) = syntax_error {
                rejected.push(DocError { file: file.clone(), index, message });
                new.extend(old.range(index..).map(|(i, o)| (*i, o.clone())));
            }
            // A document whose object differs (or is gone, or new) names
            // that object; the same one taken as it is does not.
            for (m, other) in [(&old, &new), (&new, &old)] {
                for (i, o) in m {
                    let there = other.get(i);
                    if !matches!(**o, Object::Skipped(_))
                        && !there.is_some_and(|t| Arc::ptr_eq(t, o))
                        && there != Some(o)
                    {
                        changed.insert(ObjectRef::of(o));
                    }
                }
            }
            if let Some(p) = self.parsed.get_mut(&file) {
                p.errors.clone_from(&rejected);
            }
            errors.extend(rejected);
            if !new.is_empty() {
                self.last_good.insert(file, new);
            }
        }
        let mut loaded = Loaded { errors, changed: changed.into_iter().collect(), ..Loaded::default() };
        for obj in self.last_good.values().flat_map(BTreeMap::values) {
            if !loaded.objects.push(Object::clone(obj)) {
                loaded.skipped += 1;
            }
        }
        Ok(loaded)
    }

    /// Watches the directory (inotify); every change sends what it is
    /// ([`DirEvent`]) on the returned channel. Keep the watcher alive as
    /// long as events matter.
    pub fn watch(&self) -> Result<(notify::RecommendedWatcher, mpsc::Receiver<DirEvent>), LoadError> {
        use notify::Watcher;
        let (tx, rx) = mpsc::channel();
        let err = |e: notify::Error| LoadError::Watch { dir: self.dir.clone(), message: e.to_string() };
        // The watcher names paths below the directory as it watches it:
        // made absolute as notify makes it (the working directory joined).
        let dir = match std::env::current_dir() {
            Ok(cwd) if self.dir.is_relative() => cwd.join(&self.dir),
            _ => self.dir.clone(),
        };
        let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            if let Some(said) = DirEvent::of(&dir, ev) {
                let _ = tx.send(said);
            }
        })
        .map_err(err)?;
        w.watch(&self.dir, notify::RecursiveMode::Recursive).map_err(err)?;
        Ok((w, rx))
    }
}

/// What one file event in a watched directory is, for telling a change
/// whole as it stands from a step of several (see `watch_dir` in the
/// binary): only files written aside and then renamed into place are
/// whole for sure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEvent {
    /// A file not read (not a manifest, or hidden) made or written to:
    /// written aside, if it is then renamed away.
    Aside(PathBuf),
    /// A file not read renamed away (where it went is another event).
    AsideMoved(PathBuf),
    /// A manifest renamed into place.
    Landed,
    /// Anything else: a manifest written in place, removed or moved away;
    /// a directory made; a file not read renamed into place (a directory
    /// of manifests, maybe); the watcher's own error.
    Other,
}

impl DirEvent {
    /// What `ev` (below `dir`) is, or `None` where it changes nothing
    /// (a read, an open, a close: what was written said so already).
    fn of(dir: &Path, ev: notify::Result<notify::Event>) -> Option<DirEvent> {
        use notify::event::{CreateKind, EventKind, ModifyKind, RenameMode};
        let Ok(e) = ev else { return Some(DirEvent::Other) };
        if e.kind.is_access() {
            return None;
        }
        let read = |p: &PathBuf| read_here(dir, p);
        // (A directory with a manifest's name, renamed into place, is not
        // one: its files may be read before they are watched.)
        let landed = |p: &PathBuf| read(p) && !p.is_dir();
        let [path] = e.paths.as_slice() else {
            // Both ends of a rename: its two ends came as events of their own.
            return Some(match e.kind {
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)) if e.paths.last().is_some_and(landed) => {
                    DirEvent::Landed
                }
                _ => DirEvent::Other,
            });
        };
        Some(match e.kind {
            EventKind::Modify(ModifyKind::Name(RenameMode::To)) if landed(path) => DirEvent::Landed,
            EventKind::Modify(ModifyKind::Name(RenameMode::From)) if !read(path) => DirEvent::AsideMoved(path.clone()),
            EventKind::Create(CreateKind::File)
            | EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Metadata(_) | ModifyKind::Any)
                if !read(path) =>
            {
                DirEvent::Aside(path.clone())
            }
            _ => DirEvent::Other,
        })
    }
}

/// Whether `path` (below `dir`) names a manifest a reload reads by that
/// name: not hidden, nor below a hidden directory (a ConfigMap mount's
/// `..<timestamp>` files are read through its links).
fn read_here(dir: &Path, path: &Path) -> bool {
    is_manifest(path)
        && path
            .strip_prefix(dir)
            .is_ok_and(|rel| rel.components().all(|c| !c.as_os_str().as_encoded_bytes().starts_with(b".")))
}

/// Reads every manifest below `dir` once.
pub fn load(dir: &Path) -> Result<Loaded, LoadError> {
    ConfigDir::new(dir).reload()
}

#[cfg(test)]
mod tests;
