//! A chunk directory on disk: its chunk files, encoding a file into it with atomic renames,
//! opening its chunk files for decode and verify, and temporary files left by killed runs.
//!
//! Outputs are written under a temporary name holding the process id in the target directory
//! and renamed into place only when complete and checked: a failed run removes its temporary
//! files and never leaves a wrong file under the final name, and temporary files of a run that
//! was killed are removed by the next run in that directory.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::chunk_file::{chunk_file_name, parse_chunk_file_name};
use codes::Code;

use crate::encode::{check_params, encode_stream, EncodeSummary};
use crate::set::{name_list, Candidate, ChunkSet};
use crate::FileError;

/// A directory of chunk files (`chunk-000` …).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkDir {
    path: PathBuf,
}

/// What [`ChunkDir::encode_file`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeOutcome {
    pub summary: EncodeSummary,
    /// Temporary files of an interrupted encode that were removed first.
    pub stale_removed: Vec<String>,
    /// Chunk files of an earlier, wider encode removed after the new ones were in place.
    pub extra_removed: Vec<String>,
}

impl ChunkDir {
    pub fn new(path: impl Into<PathBuf>) -> ChunkDir {
        ChunkDir { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The chunk files by the index their name gives.
    pub fn chunk_files(&self) -> Result<BTreeMap<usize, PathBuf>, FileError> {
        if !self.path.exists() {
            return Err(FileError::NoSuchDirectory(self.path.clone()));
        }
        if !self.path.is_dir() {
            return Err(FileError::NotADirectory(self.path.clone()));
        }
        let mut out = BTreeMap::new();
        let entries = fs::read_dir(&self.path).map_err(FileError::io("list", &self.path))?;
        for entry in entries {
            let entry = entry.map_err(FileError::io("list", &self.path))?;
            if let Some(i) = entry.file_name().to_str().and_then(parse_chunk_file_name) {
                out.insert(i, entry.path());
            }
        }
        Ok(out)
    }

    /// Opens every chunk file and picks the encoded file most of them describe.
    pub fn open_set(&self) -> Result<ChunkSet<File>, FileError> {
        let candidates = self
            .chunk_files()?
            .into_iter()
            .map(|(name_index, path)| Candidate {
                name_index,
                source: File::open(&path).and_then(|f| {
                    let len = f.metadata()?.len();
                    Ok((f, len))
                }),
            })
            .collect();
        ChunkSet::scan(&self.path, candidates)
    }

    /// Encodes the regular file `input` into this directory (created if missing) with `code`
    /// and `chunk_bytes`. Chunk files already there are an error unless `replace`. Chunk files
    /// are written as `.chunk-NNN.<pid>.partial` and renamed when all are complete and
    /// synced; on any error they are removed.
    pub fn encode_file(
        &self,
        input: &Path,
        code: Code,
        chunk_bytes: usize,
        replace: bool,
        progress: &mut dyn FnMut(u64),
    ) -> Result<EncodeOutcome, FileError> {
        let mut file = File::open(input).map_err(FileError::io("open", input))?;
        let meta = file.metadata().map_err(FileError::io("read", input))?;
        if !meta.is_file() {
            return Err(FileError::NotARegularFile(input.to_path_buf()));
        }
        let file_bytes = meta.len();
        // Check the parameters (file_bytes among them) before touching the directory.
        check_params(code, chunk_bytes, file_bytes)?;
        let dir = &self.path;
        if dir.exists() && !dir.is_dir() {
            return Err(FileError::NotADirectory(dir.clone()));
        }
        fs::create_dir_all(dir).map_err(FileError::io("create", dir))?;
        let existing = self.chunk_files()?;
        if !existing.is_empty() && !replace {
            return Err(FileError::ChunkFilesExist {
                dir: dir.clone(),
                names: name_list(existing.keys().map(|&i| chunk_file_name(i))),
            });
        }
        let stale_removed =
            remove_stale_partials(dir, true, |name| parse_chunk_file_name(name).is_some())?;

        // Chunk files are written with a zeroed header (no magic) until the content checksum
        // is known; they get their names only once complete.
        let n = code.n();
        let mut partial = Partial::default();
        let mut writers = Vec::with_capacity(n);
        for i in 0..n {
            let path = dir.join(partial_name(&chunk_file_name(i)));
            let f = create_new(&path)?;
            partial.add(path);
            writers.push(BufWriter::with_capacity(1 << 16, f));
        }
        let summary = encode_stream(
            code,
            chunk_bytes,
            file_bytes,
            &mut file,
            &mut writers,
            progress,
        )?;
        for w in writers {
            let f = w
                .into_inner()
                .map_err(|e| FileError::stream("cannot write a chunk file")(e.into_error()))?;
            f.sync_all()
                .map_err(FileError::stream("cannot sync a chunk file"))?;
        }
        for (i, path) in partial.paths.iter().enumerate() {
            let to = dir.join(chunk_file_name(i));
            fs::rename(path, &to).map_err(FileError::io("rename into", &to))?;
        }
        partial.keep();
        // Chunk files of an earlier, wider encode would otherwise linger beside the new ones.
        let mut extra_removed = Vec::new();
        for (&i, path) in &existing {
            if i >= n {
                fs::remove_file(path).map_err(FileError::io("remove", path))?;
                extra_removed.push(chunk_file_name(i));
            }
        }
        sync_dir(dir);
        Ok(EncodeOutcome {
            summary,
            stale_removed,
            extra_removed,
        })
    }
}

fn create_new(path: &Path) -> Result<File, FileError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(FileError::io("create", path))
}

/// A regular file written under a temporary name beside its final path and renamed into
/// place by [`AtomicFile::commit`]; dropped uncommitted, the temporary file is removed.
#[derive(Debug)]
pub struct AtomicFile {
    target: PathBuf,
    dir: PathBuf,
    file: Option<BufWriter<File>>,
    partial: Partial,
}

impl AtomicFile {
    /// Creates `.{name}.{pid}.partial` beside `target`, first removing such files of killed
    /// runs for the same name.
    pub fn create(target: &Path) -> Result<AtomicFile, FileError> {
        let name = target
            .file_name()
            .ok_or_else(|| FileError::NotARegularFile(target.to_path_buf()))?
            .to_string_lossy()
            .into_owned();
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(FileError::NoSuchDirectory(dir));
        }
        remove_stale_partials(&dir, false, |n| n == name)?;
        let tmp = dir.join(partial_name(&name));
        let file = create_new(&tmp)?;
        let mut partial = Partial::default();
        partial.add(tmp);
        Ok(AtomicFile {
            target: target.to_path_buf(),
            dir,
            file: Some(BufWriter::with_capacity(1 << 16, file)),
            partial,
        })
    }

    /// Syncs the file and renames it to its final path.
    pub fn commit(mut self) -> Result<(), FileError> {
        let w = self.file.take().expect("not yet committed");
        let f = w
            .into_inner()
            .map_err(|e| FileError::stream("cannot write the output")(e.into_error()))?;
        f.sync_all()
            .map_err(FileError::stream("cannot sync the output"))?;
        fs::rename(&self.partial.paths[0], &self.target)
            .map_err(FileError::io("rename into", &self.target))?;
        std::mem::take(&mut self.partial).keep();
        sync_dir(&self.dir);
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.as_mut().expect("not yet committed").write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.as_mut().expect("not yet committed").flush()
    }
}

/// Files that are removed when dropped unless `keep` was called: the partial outputs of a
/// run that failed part way.
#[derive(Debug, Default)]
struct Partial {
    paths: Vec<PathBuf>,
}

impl Partial {
    fn add(&mut self, path: PathBuf) {
        self.paths.push(path);
    }
    fn keep(mut self) {
        self.paths.clear();
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = fs::remove_file(p);
        }
    }
}

/// The temporary name of a file being written by this process: `.{name}.{pid}.partial`.
pub fn partial_name(name: &str) -> String {
    format!(".{name}.{}.partial", std::process::id())
}

/// Whether process `pid` exists. Without `/proc` nothing can be known: assume it does.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

/// Removes the temporary files `.{name}.{pid}.partial` in `dir` for which `is_target(name)`
/// holds and whose process no longer exists: what a run that was killed left behind. Running
/// writers are left alone. With `pidless`, also `.{name}.partial` (the name encode used before
/// temporary names carried the pid). Returns the names removed.
pub fn remove_stale_partials(
    dir: &Path,
    pidless: bool,
    is_target: impl Fn(&str) -> bool,
) -> Result<Vec<String>, FileError> {
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(FileError::io("list", dir))? {
        let entry = entry.map_err(FileError::io("list", dir))?;
        let file_name = entry.file_name();
        let Some(full) = file_name.to_str() else {
            continue;
        };
        let Some(inner) = full
            .strip_prefix('.')
            .and_then(|x| x.strip_suffix(".partial"))
        else {
            continue;
        };
        let stale = match inner.rsplit_once('.') {
            Some((name, pid)) if pid.bytes().all(|b| b.is_ascii_digit()) => {
                is_target(name) && pid.parse().is_ok_and(|pid| !process_alive(pid))
            }
            _ => pidless && is_target(inner),
        };
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if stale && is_file {
            let path = entry.path();
            fs::remove_file(&path).map_err(FileError::io("remove", &path))?;
            removed.push(full.to_string());
        }
    }
    Ok(removed)
}

/// Makes renames in `dir` durable where the platform allows; best effort.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}
