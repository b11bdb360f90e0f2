//! The files of outputs, kept. A files task's output (`[tasks.NAME.files]`)
//! holds its files as `data:` URIs (a Cog server without an upload URL) or
//! as `http(s)://` URLs (one with an upload URL, a hosted API's delivery
//! URL). Before the output is recorded, each is decoded or fetched
//! (`fetch.rs`), checked against the task's rules (media type, size) and
//! written to the blob store, a directory with one folder per job, under a
//! name of its own (`{attempt}-{index}.{extension}`); the output then
//! holds, in its place, what names the kept file:
//! `{"file", "url", "content_type", "size", "sha256"}`, the `url` being
//! `GET /jobs/{id}/files/{file}`, and for a fetched one `source`, the URL
//! it came from (which may expire).
//!
//! A file is written to a temporary name, flushed to disk and renamed, so
//! that a result never names a file that is not whole. With `[files.s3]`,
//! it is then uploaded to the bucket (`remote.rs`) before the output is
//! recorded, and removed from the directory. The folder of a job goes with
//! the job when it is purged or erased.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::FileRules;
use crate::domain::JobId;
use crate::webhooks::address::AllowedHosts;

mod fetch;
mod guard;
mod remote;

/// The blob store: a directory (or a bucket, the directory holding each
/// file until it is uploaded), and the client its files are fetched with.
pub struct Files {
    dir: PathBuf,
    remote: Option<std::sync::Arc<remote::Remote>>,
    client: reqwest::Client,
    allowed: AllowedHosts,
    keeps: guard::Keeps,
}

/// A file of an output, as it comes.
enum Source {
    /// Inline (a `data:` URI): its media type and bytes.
    Inline(String, Vec<u8>),
    /// By URL, to fetch.
    Url(reqwest::Url),
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
pub struct KeptFile {
    /// Its media type.
    pub content_type: String,
    /// Its size in bytes.
    pub size: u64,
    place: Place,
}

/// Where a kept file is.
enum Place {
    Local(PathBuf),
    Remote(std::sync::Arc<remote::Remote>, JobId, String),
}

impl KeptFile {
    /// Bytes `start` up to `end` of the file, as they come (never read whole).
    pub async fn read(
        &self,
        start: u64,
        end: u64,
    ) -> std::io::Result<futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>> {
        use futures_util::StreamExt as _;
        use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};
        match &self.place {
            Place::Remote(remote, job, name) => remote.read(*job, name, start, end).await,
            Place::Local(path) => {
                let mut file = tokio::fs::File::open(path).await?;
                file.seek(std::io::SeekFrom::Start(start)).await?;
                let chunks = futures_util::stream::unfold(
                    (file.take(end.saturating_sub(start)), vec![0; 64 * 1024]),
                    |(mut file, mut buf)| async {
                        match file.read(&mut buf).await {
                            Ok(0) => None,
                            Ok(read) => Some((Ok(bytes::Bytes::copy_from_slice(&buf[..read])), (file, buf))),
                            Err(error) => Some((Err(error), (file, buf))),
                        }
                    },
                );
                Ok(chunks.boxed())
            }
        }
    }
}

impl Files {
    /// The blob store in `dir`, fetching from the hosts `allow_hosts`
    /// lists although they are not public (`files.allow_hosts`).
    pub fn new(dir: PathBuf, allow_hosts: &[String]) -> Self {
        let allowed = AllowedHosts::new(allow_hosts);
        Self { dir, remote: None, client: fetch::client(&allowed), allowed, keeps: guard::Keeps::default() }
    }

    /// The blob store `settings` describe, for the database at
    /// `database_url`: a bucket where `[files.s3]` names one.
    pub fn of(settings: &crate::config::FilesSettings, database_url: &str) -> Result<Self, String> {
        let mut files = Self::new(settings.dir_for(database_url), &settings.allow_hosts);
        if let Some(s3) = &settings.s3 {
            files.remote = Some(std::sync::Arc::new(remote::Remote::new(s3)?));
        }
        Ok(files)
    }

    fn job_dir(&self, job: JobId) -> PathBuf {
        self.dir.join(job.to_string())
    }

    /// Keeps the files of `output`, attempt `number`'s of `job`, by
    /// `rules`, and replaces each in it by what names its kept file; on an
    /// error, `output` is as it was. One keep of an attempt runs at a time,
    /// and a second keep of it takes the first one's result.
    pub async fn keep(&self, job: JobId, number: i32, output: &mut Value, rules: &FileRules) -> Result<(), KeepError> {
        let slot = self.keeps.slot(job, number);
        let mut kept_before = slot.lock().await;
        if let Some(kept) = kept_before.as_ref() {
            *output = kept.clone();
            return Ok(());
        }
        self.keep_once(job, number, output, rules).await?;
        *kept_before = Some(output.clone());
        Ok(())
    }

    async fn keep_once(&self, job: JobId, number: i32, output: &mut Value, rules: &FileRules) -> Result<(), KeepError> {
        let sources = sources(output, rules, &self.allowed).map_err(KeepError::Rejected)?;
        let dir = self.job_dir(job);
        let mut named = Vec::with_capacity(sources.len());
        let mut kept = self.keep_each(job, number, sources, &mut named, rules).await;
        if kept.is_ok()
            && let Some(remote) = &self.remote
        {
            kept = upload(remote, job, &dir, &named).await.map_err(KeepError::Io);
        }
        if let Err(error) = kept {
            // What this output's refused or unfinished keep wrote goes.
            for (_, file) in &named {
                if let Some(name) = file.get("file").and_then(Value::as_str) {
                    let _ = tokio::fs::remove_file(dir.join(name)).await;
                }
            }
            return Err(error);
        }
        for (pointer, file) in named {
            *output.pointer_mut(&pointer).expect("the pointer was collected from this value") = file;
        }
        Ok(())
    }

    /// Keeps each of `sources`, pushing what names each kept file to
    /// `named` as it goes.
    async fn keep_each(
        &self,
        job: JobId,
        number: i32,
        sources: Vec<(String, Source)>,
        named: &mut Vec<(String, Value)>,
        rules: &FileRules,
    ) -> Result<(), KeepError> {
        let dir = self.job_dir(job);
        for (index, (pointer, source)) in sources.into_iter().enumerate() {
            let url = |name: &str| format!("/jobs/{job}/files/{name}");
            let file = match source {
                Source::Inline(content_type, bytes) => {
                    let name = format!("{number}-{index}.{}", extension(&content_type));
                    let sha256 = hex::encode(Sha256::digest(&bytes));
                    let size = bytes.len() as u64;
                    let (dir, file) = (dir.clone(), name.clone());
                    tokio::task::spawn_blocking(move || write_whole(&dir, &file, &bytes))
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))??;
                    json!({"file": name, "url": url(&name), "content_type": content_type, "size": size, "sha256": sha256})
                }
                Source::Url(source) => {
                    let stem = format!("{number}-{index}");
                    let fetched = match fetch::fetch_to(&self.client, &source, &dir, &stem, rules).await {
                        Ok(fetched) => fetched,
                        Err(fetch::Fetch::Rejected(why)) => {
                            return Err(KeepError::Rejected(format!("{pointer}: {why}")));
                        }
                        Err(fetch::Fetch::Again(why)) => return Err(KeepError::Io(std::io::Error::other(why))),
                    };
                    json!({"file": fetched.name, "url": url(&fetched.name), "content_type": fetched.content_type,
                           "size": fetched.size, "sha256": fetched.sha256, "source": source.as_str()})
                }
            };
            named.push((pointer, file));
        }
        Ok(())
    }

    /// The kept file `name` of `job`, if there is one. Its media type
    /// follows from its name, which [`Files::keep`] gave it: nothing an
    /// output says is trusted to serve it.
    pub async fn find(&self, job: JobId, name: &str) -> Option<KeptFile> {
        let content_type = media_type_of(kept_extension(name)?).to_owned();
        if let Some(remote) = &self.remote {
            let size = remote.size(job, name).await?;
            return Some(KeptFile { content_type, size, place: Place::Remote(remote.clone(), job, name.to_owned()) });
        }
        let path = self.job_dir(job).join(name);
        let size = tokio::fs::metadata(&path).await.ok().filter(std::fs::Metadata::is_file)?.len();
        Some(KeptFile { content_type, size, place: Place::Local(path) })
    }

    /// Whether this blob store is the one of the database `identity` names:
    /// the first to ask marks it as its own (`.database`), and another
    /// database sharing it is told no.
    pub async fn is_of(&self, identity: &str) -> bool {
        // The directory is swept too, with a bucket: both must be its own.
        let Some(remote) = &self.remote else { return self.dir_is_of(identity).await };
        let marked = match remote.mark().await {
            Ok(Some(found)) => Ok(found == identity),
            Ok(None) => remote.set_mark(identity).await.map(|()| true),
            Err(error) => Err(error),
        };
        let bucket = marked.unwrap_or_else(|error| {
            tracing::warn!(%error, "the bucket's mark could not be read or written");
            false
        });
        bucket && self.dir_is_of(identity).await
    }

    async fn dir_is_of(&self, identity: &str) -> bool {
        let marker = self.dir.join(".database");
        match tokio::fs::read_to_string(&marker).await {
            Ok(found) => found.trim() == identity,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let marked = async {
                    sync_new_dir(&self.dir).await?;
                    tokio::fs::write(&marker, identity).await
                };
                match marked.await {
                    Ok(()) => true,
                    Err(error) => {
                        tracing::warn!(%error, "the blob store could not be marked as this database's");
                        false
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "the blob store's mark could not be read");
                false
            }
        }
    }

    /// The jobs with a folder of files unchanged for `age`: a sweep's
    /// candidates (a folder whose job is gone was left by a crash between
    /// the job's removal and its files').
    pub async fn folders_older_than(&self, age: std::time::Duration) -> Vec<JobId> {
        let mut jobs = self.local_folders_older_than(age).await;
        if let Some(remote) = &self.remote {
            match remote.folders_older_than(age).await {
                Ok(more) => jobs.extend(more.into_iter().filter(|job| !jobs.contains(job)).collect::<Vec<_>>()),
                Err(error) => tracing::warn!(%error, "the bucket's folders could not be listed"),
            }
        }
        jobs
    }

    async fn local_folders_older_than(&self, age: std::time::Duration) -> Vec<JobId> {
        let dir = self.dir.clone();
        let listed = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<JobId>> {
            let mut jobs = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let old = entry.metadata()?.modified()?.elapsed().is_ok_and(|elapsed| elapsed >= age);
                if let Some(job) = entry.file_name().to_str().and_then(JobId::parse).filter(|_| old) {
                    jobs.push(job);
                }
            }
            Ok(jobs)
        })
        .await;
        match listed {
            Ok(Ok(jobs)) => jobs,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Ok(Err(error)) => {
                tracing::warn!(%error, "the files' folders could not be listed");
                Vec::new()
            }
            Err(_) => Vec::new(),
        }
    }

    /// Removes the files of `jobs` (purged or erased).
    pub async fn remove(&self, jobs: &[JobId]) {
        for job in jobs {
            match tokio::fs::remove_dir_all(self.job_dir(*job)).await {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(%error, job.id = %job, "the files of a removed job could not be removed"),
            }
            if let Some(remote) = &self.remote
                && let Err(error) = remote.remove(*job).await
            {
                tracing::warn!(%error, job.id = %job, "the files of a removed job could not be removed from the bucket");
            }
        }
    }
}

/// Uploads each of `named` (kept in `dir`) to `remote`, then removes it
/// from `dir`. On an error, what was uploaded stays (another replica's
/// keep of the same outcome may name it), until its job goes.
async fn upload(remote: &remote::Remote, job: JobId, dir: &Path, named: &[(String, Value)]) -> std::io::Result<()> {
    let names: Vec<&str> = named.iter().filter_map(|(_, file)| file.get("file")?.as_str()).collect();
    for name in &names {
        remote.upload(job, name, &dir.join(name)).await?;
    }
    for name in names {
        let _ = tokio::fs::remove_file(dir.join(name)).await;
    }
    Ok(())
}

/// The names of the kept images `value` (a job's result) names, in order:
/// what a page shows as thumbnails.
pub fn images_named(value: &Value) -> Vec<String> {
    let image = |name: &String| name.rsplit_once('.').is_some_and(|(_, e)| media_type_of(e).starts_with("image/"));
    named(value).into_iter().filter(image).collect()
}

/// The names of the kept files `value` (a job's result) names, in order.
pub fn named(value: &Value) -> Vec<String> {
    fn walk(value: &Value, names: &mut Vec<String>) {
        match value {
            Value::Object(fields) => match fields.get("file").and_then(Value::as_str) {
                Some(name) if fields.contains_key("url") && kept_extension(name).is_some() => {
                    names.push(name.to_owned())
                }
                _ => fields.values().for_each(|v| walk(v, names)),
            },
            Value::Array(items) => items.iter().for_each(|v| walk(v, names)),
            _ => {}
        }
    }
    let mut names = Vec::new();
    walk(value, &mut names);
    names
}

/// Whether `output`'s files meet `rules`, as far as can be told without
/// fetching (a file by URL is checked when it is fetched): how many it
/// holds, or why it breaks them.
pub fn check(output: &Value, rules: &FileRules) -> Result<usize, String> {
    // Any host: the address rules are the fetch's.
    sources(output, rules, &AllowedHosts::every()).map(|files| files.len())
}

/// Every file of `output`, by its JSON pointer: a `data:` URI decoded and
/// checked against `rules`, a URL checked against the address rules.
fn sources(output: &Value, rules: &FileRules, allowed: &AllowedHosts) -> Result<Vec<(String, Source)>, String> {
    let mut found = Vec::new();
    collect(output, &mut found);
    if found.len() < rules.min_files as usize {
        return Err(format!(
            "the output holds {} file(s) (data: URIs or URLs); the task needs at least {}",
            found.len(),
            rules.min_files
        ));
    }
    if let Some(most) = rules.max_files.filter(|most| found.len() > *most as usize) {
        return Err(format!(
            "the output holds {} files (data: URIs or URLs); the task takes at most {most}",
            found.len()
        ));
    }
    let mut sources = Vec::with_capacity(found.len());
    for (pointer, text) in found {
        if text.starts_with("data:") {
            let (content_type, bytes) = decode(&text)?;
            check_one(rules, &content_type, bytes.len() as u64).map_err(|why| format!("{pointer}: {why}"))?;
            sources.push((pointer, Source::Inline(content_type, bytes)));
        } else {
            let url = fetch::check_url(&text, allowed).map_err(|why| format!("{pointer}: {why}"))?;
            sources.push((pointer, Source::Url(url)));
        }
    }
    Ok(sources)
}

/// Every file of `value` (a `data:` URI, an `http(s)://` URL), by its JSON
/// pointer.
fn collect(value: &Value, found: &mut Vec<(String, String)>) {
    fn walk(value: &Value, at: String, found: &mut Vec<(String, String)>) {
        match value {
            Value::String(text) if ["data:", "http://", "https://"].iter().any(|p| text.starts_with(p)) => {
                found.push((at, text.clone()))
            }
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
fn check_one(rules: &FileRules, content_type: &str, size: u64) -> Result<(), String> {
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

/// Writes `bytes` as `dir/name`, whole or not at all: a temporary file of
/// its own, flushed, renamed, and the directory (and, new, its parent)
/// flushed.
fn write_whole(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    ensure_dir(dir)?;
    let partial = dir.join(format!(".{name}.{}.partial", uuid::Uuid::now_v7().simple()));
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&partial, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// Makes `dir` if it is missing, its parent flushed so that it stays.
fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)?;
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
    }
    Ok(())
}

/// [`ensure_dir`], off the async threads.
async fn sync_new_dir(dir: &Path) -> std::io::Result<()> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || ensure_dir(&dir)).await.map_err(|e| std::io::Error::other(e.to_string()))?
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
        let files = Files::new(dir.clone(), &[]);
        let job = JobId(uuid::Uuid::now_v7());
        let png = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG fake");
        let output = json!({"images": [format!("data:image/png;base64,{png}")], "seed": 7});
        let mut kept = output.clone();
        files.keep(job, 2, &mut kept, &rules("types = [\"image/png\"]")).await.unwrap();
        let file = &kept["images"][0];
        assert_eq!(file["file"], "2-0.png");
        assert_eq!(file["url"], format!("/jobs/{job}/files/2-0.png"));
        assert_eq!(file["sha256"], hex::encode(Sha256::digest(b"\x89PNG fake")));
        assert_eq!((file["size"].as_u64(), &kept["seed"]), (Some(9), &json!(7)));
        assert_eq!(named(&kept), ["2-0.png"]);
        let found = files.find(job, "2-0.png").await.unwrap();
        let read: Vec<bytes::Bytes> =
            futures_util::TryStreamExt::try_collect(found.read(0, 9).await.unwrap()).await.unwrap();
        assert_eq!(read.concat(), b"\x89PNG fake");
        assert_eq!((found.content_type.as_str(), found.size), ("image/png", 9));
        for name in ["../2-0.png", "2-0.png/", "2-0.html", "2-9.png", "x-0.png"] {
            assert!(files.find(job, name).await.is_none(), "{name}: only a name keep gave, of a file kept");
        }
        let too_many =
            json!({"images": [format!("data:image/png;base64,{png}"), format!("data:image/png;base64,{png}")]});
        let error = files.keep(job, 3, &mut too_many.clone(), &rules("max_files = 1")).await.unwrap_err();
        assert!(error.to_string().contains("at most 1"), "{error}");
        for (text, why) in
            [("types = [\"video/*\"]", "type"), ("max_bytes = 8", "bytes"), ("min_files = 2", "at least")]
        {
            let mut refused = output.clone();
            let error = files.keep(job, 3, &mut refused, &rules(text)).await.unwrap_err();
            assert!(matches!(&error, KeepError::Rejected(m) if m.contains(why)), "{text}: {error}");
            assert_eq!(refused, output, "left as it was");
        }
        let mut raw = json!("data:image/png,raw");
        assert!(matches!(files.keep(job, 4, &mut raw, &rules("")).await, Err(KeepError::Rejected(_))));
        // A URL: https on a public address unless its host is allowed.
        let mut private = json!("http://127.0.0.1:9/out.png");
        let refused = files.keep(job, 5, &mut private, &rules("")).await.unwrap_err();
        assert!(refused.to_string().contains("files.allow_hosts"), "{refused}");
        assert_eq!(
            check(&json!(["https://example.com/a.png", "http://10.0.0.1/b.png"]), &rules("")),
            Ok(2),
            "the fetch checks addresses"
        );
        assert_eq!(check(&json!({"a": "https://example.com/a.png"}), &rules("")), Ok(1));
        files.remove(&[job]).await;
        assert!(!dir.join(job.to_string()).exists());
        // The first database to ask owns the store; another is told no.
        assert!(files.is_of("one").await && files.is_of("one").await);
        assert!(!files.is_of("another").await, "a store shared with another database is not swept");
        let _ = std::fs::remove_dir_all(dir);
    }
}
