//! The files of outputs, kept. A files task's output (`[tasks.NAME.files]`)
//! holds its files as `data:` URIs, as a Cog server without an upload URL
//! answers. Before the output is recorded, each is decoded, checked
//! against the task's rules (media type, size) and written to the blob
//! store, a directory with one folder per job, under a name of its own
//! (`{attempt}-{index}.{extension}`); the output then holds, in its place,
//! what names the kept file:
//! `{"file", "url", "content_type", "size", "sha256"}`, the `url` being
//! `GET /jobs/{id}/files/{file}`.
//!
//! A file is written to a temporary name, flushed to disk and renamed, so
//! that a result never names a file that is not whole. The folder of a job
//! goes with the job when it is purged or erased.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::FileRules;
use crate::domain::JobId;

/// The blob store: a directory.
pub struct Files {
    dir: PathBuf,
}

/// Why an output's files were not kept.
#[derive(Debug, thiserror::Error)]
pub enum KeepError {
    /// A file breaks the task's rules, or is not a file: the output breaks
    /// the contract.
    #[error("{0}")]
    Rejected(String),
    /// The blob store could not be written: the same output may be kept
    /// again.
    #[error("the files could not be written: {0}")]
    Io(#[from] std::io::Error),
}

/// A kept file, as `GET /jobs/{id}/files/{name}` serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeptFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Files {
    /// The blob store in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn job_dir(&self, job: JobId) -> PathBuf {
        self.dir.join(job.to_string())
    }

    /// Keeps the files of `output`, attempt `number`'s of `job`, by
    /// `rules`: the output with each `data:` URI replaced by what names
    /// its kept file.
    pub async fn keep(&self, job: JobId, number: i32, output: &Value, rules: &FileRules) -> Result<Value, KeepError> {
        let mut found = Vec::new();
        let mut kept = output.clone();
        collect(&mut kept, &mut found);
        if found.len() < rules.min_files as usize {
            return Err(KeepError::Rejected(format!(
                "the output holds {} file(s) as data: URIs; the task needs at least {}",
                found.len(),
                rules.min_files
            )));
        }
        let mut decoded = Vec::with_capacity(found.len());
        for (index, (pointer, uri)) in found.into_iter().enumerate() {
            let (content_type, bytes) = decode(&uri).map_err(KeepError::Rejected)?;
            check(rules, &content_type, bytes.len() as u64)
                .map_err(|why| KeepError::Rejected(format!("{pointer}: {why}")))?;
            let name = format!("{number}-{index}.{}", extension(&content_type));
            decoded.push((pointer, name, content_type, bytes));
        }
        let dir = self.job_dir(job);
        for (pointer, name, content_type, bytes) in decoded {
            let sha256 = hex::encode(Sha256::digest(&bytes));
            let size = bytes.len() as u64;
            let (dir, file) = (dir.clone(), name.clone());
            tokio::task::spawn_blocking(move || write_whole(&dir, &file, &bytes))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))??;
            let named = json!({
                "file": name,
                "url": format!("/jobs/{job}/files/{name}"),
                "content_type": content_type,
                "size": size,
                "sha256": sha256,
            });
            *kept.pointer_mut(&pointer).expect("the pointer was collected from this value") = named;
        }
        Ok(kept)
    }

    /// The kept file `name` of `job`, if there is one. Its media type
    /// follows from its name, which [`Files::keep`] gave it: nothing an
    /// output says is trusted to serve it.
    pub async fn find(&self, job: JobId, name: &str) -> Option<KeptFile> {
        let extension = kept_extension(name)?;
        let path = self.job_dir(job).join(name);
        let size = tokio::fs::metadata(&path).await.ok().filter(std::fs::Metadata::is_file)?.len();
        Some(KeptFile { path, content_type: media_type_of(extension).to_owned(), size })
    }

    /// Removes the files of `jobs` (purged or erased).
    pub async fn remove(&self, jobs: &[JobId]) {
        for job in jobs {
            match tokio::fs::remove_dir_all(self.job_dir(*job)).await {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(%error, job.id = %job, "the files of a removed job could not be removed"),
            }
        }
    }
}

/// Every `data:` URI in `value`, by its JSON pointer.
fn collect(value: &mut Value, found: &mut Vec<(String, String)>) {
    fn walk(value: &Value, at: String, found: &mut Vec<(String, String)>) {
        match value {
            Value::String(text) if text.starts_with("data:") => found.push((at, text.clone())),
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, format!("{at}/{index}"), found);
                }
            }
            Value::Object(fields) => {
                for (key, item) in fields {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    walk(item, format!("{at}/{key}"), found);
                }
            }
            _ => {}
        }
    }
    walk(value, String::new(), found);
}

/// A `data:` URI's media type and bytes (base64 only: what model servers send).
fn decode(uri: &str) -> Result<(String, Vec<u8>), String> {
    let rest = uri.strip_prefix("data:").ok_or("not a data: URI")?;
    let (header, data) = rest.split_once(',').ok_or("a data: URI without a comma")?;
    let mut parts = header.split(';');
    let media_type = parts.next().filter(|t| !t.is_empty()).unwrap_or("text/plain").to_ascii_lowercase();
    if !parts.any(|part| part.eq_ignore_ascii_case("base64")) {
        return Err("a data: URI that is not base64".into());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("a data: URI whose base64 does not decode: {e}"))?;
    Ok((media_type, bytes))
}

/// Whether a file of `content_type` and `size` meets `rules`.
fn check(rules: &FileRules, content_type: &str, size: u64) -> Result<(), String> {
    if !rules.allows(content_type) {
        return Err(format!(
            "a file of type {content_type}, which the task does not take ({})",
            rules.types.join(", ")
        ));
    }
    if size < rules.min_bytes || size > rules.max_bytes {
        return Err(format!(
            "a file of {size} bytes, outside the task's {} to {} bytes",
            rules.min_bytes, rules.max_bytes
        ));
    }
    Ok(())
}

/// The media types kept files are named by, with their extensions; any
/// other is kept as `bin` and served as `application/octet-stream`.
const EXTENSIONS: &[(&str, &str)] = &[
    ("image/png", "png"),
    ("image/jpeg", "jpg"),
    ("image/webp", "webp"),
    ("image/gif", "gif"),
    ("video/mp4", "mp4"),
    ("video/webm", "webm"),
    ("audio/wav", "wav"),
    ("audio/mpeg", "mp3"),
    ("audio/ogg", "ogg"),
];

/// The extension a kept file of `content_type` is named with.
fn extension(content_type: &str) -> &'static str {
    let content_type = if content_type == "audio/x-wav" { "audio/wav" } else { content_type };
    EXTENSIONS.iter().find(|(media_type, _)| *media_type == content_type).map_or("bin", |(_, extension)| extension)
}

/// The media type a kept file with `extension` is served as.
fn media_type_of(extension: &str) -> &'static str {
    EXTENSIONS.iter().find(|(_, e)| *e == extension).map_or("application/octet-stream", |(media_type, _)| media_type)
}

/// Writes `bytes` as `dir/name`, whole or not at all: a temporary file,
/// flushed, renamed, and the directory flushed.
fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let partial = dir.join(format!(".{name}.partial"));
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// The extension of `name` when it is a name [`Files::keep`] gives:
/// `{attempt}-{index}.{extension}`.
fn kept_extension(name: &str) -> Option<&str> {
    let (stem, extension) = name.split_once('.')?;
    let (attempt, index) = stem.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 10 && s.bytes().all(|b| b.is_ascii_digit());
    let known = extension == "bin" || EXTENSIONS.iter().any(|(_, e)| *e == extension);
    (digits(attempt) && digits(index) && known).then_some(extension)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> FileRules {
        toml::from_str(text).unwrap()
    }

    #[tokio::test]
    async fn data_uris_are_kept_and_named_and_a_file_against_the_rules_is_refused() {
        let dir = std::env::temp_dir().join(format!("onejob-files-{}", uuid::Uuid::now_v7()));
        let files = Files::new(dir.clone());
        let job = JobId(uuid::Uuid::now_v7());
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
        let output = json!({"images": [format!("data:image/png;base64,{png}")], "seed": 7});
        let kept = files.keep(job, 2, &output, &rules("types = [\"image/png\"]")).await.unwrap();
        let named = &kept["images"][0];
        assert_eq!(named["file"], "2-0.png");
        assert_eq!(named["url"], format!("/jobs/{job}/files/2-0.png"));
        assert_eq!(named["sha256"], hex::encode(Sha256::digest(b"\x89PNG fake")));
        assert_eq!((named["size"].as_u64(), &kept["seed"]), (Some(9), &json!(7)));
        let found = files.find(job, "2-0.png").await.unwrap();
        assert_eq!(std::fs::read(&found.path).unwrap(), b"\x89PNG fake");
        assert_eq!((found.content_type.as_str(), found.size), ("image/png", 9));
        for name in ["../2-0.png", "2-0.png/", "2-0.html", "2-9.png", "x-0.png"] {
            assert!(files.find(job, name).await.is_none(), "{name}: only a name keep gave, of a file kept");
        }
        for (text, why) in
            [("types = [\"video/*\"]", "type"), ("max_bytes = 8", "bytes"), ("min_files = 2", "at least")]
        {
            let error = files.keep(job, 3, &output, &rules(text)).await.unwrap_err();
            assert!(matches!(&error, KeepError::Rejected(m) if m.contains(why)), "{text}: {error}");
        }
        assert!(matches!(
            files.keep(job, 4, &json!("data:image/png,raw"), &rules("")).await,
            Err(KeepError::Rejected(_))
        ));
        files.remove(&[job]).await;
        assert!(!dir.join(job.to_string()).exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
