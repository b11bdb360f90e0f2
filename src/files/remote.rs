//! The blob store in an S3-compatible bucket (`[files.s3]`): each file,
//! once written whole to the local directory, is uploaded in parts
//! (never held whole) to `{prefix}{job}/{name}`, then removed locally; it
//! is served from the bucket, a range by a ranged GET. A job's files go
//! by listing its folder; the bucket's mark of its database is the
//! object `{prefix}.database`.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt as _, TryStreamExt as _};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, PutPayload};
use tokio::io::AsyncWriteExt as _;

use crate::config::S3Settings;
use crate::domain::JobId;

/// A bucket, under a prefix.
pub(crate) struct Remote {
    bucket: Arc<dyn ObjectStore>,
    prefix: String,
}

impl Remote {
    /// The bucket `settings` name, its keys read from their variables.
    pub(super) fn new(settings: &S3Settings) -> Result<Self, String> {
        let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        let mut builder = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(&settings.bucket)
            .with_region(&settings.region)
            .with_allow_http(settings.allow_http);
        if let Some(endpoint) = &settings.endpoint {
            builder = builder.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
        }
        match (variable(&settings.access_key_env), variable(&settings.secret_key_env)) {
            (Some(key), Some(secret)) => {
                builder = builder.with_access_key_id(key).with_secret_access_key(secret);
            }
            _ => {
                return Err(format!(
                    "files.s3: set {} and {} (the bucket's access key)",
                    settings.access_key_env, settings.secret_key_env
                ));
            }
        }
        let store = builder.build().map_err(|e| format!("files.s3: {e}"))?;
        let prefix = match settings.prefix.trim_end_matches('/') {
            "" => String::new(),
            folder => format!("{folder}/"),
        };
        Ok(Self { bucket: Arc::new(store), prefix })
    }

    fn folder(&self, job: JobId) -> ObjectPath {
        ObjectPath::from(format!("{}{job}", self.prefix))
    }

    fn path(&self, job: JobId, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}{job}/{name}", self.prefix))
    }

    /// Uploads the local file `from` as `name` of `job`, in parts.
    pub(super) async fn upload(&self, job: JobId, name: &str, from: &std::path::Path) -> std::io::Result<()> {
        let mut file = tokio::fs::File::open(from).await?;
        let mut writer = object_store::buffered::BufWriter::new(self.bucket.clone(), self.path(job, name));
        let copied = async {
            tokio::io::copy(&mut file, &mut writer).await?;
            writer.shutdown().await
        };
        if let Err(error) = copied.await {
            let _ = writer.abort().await;
            return Err(error);
        }
        Ok(())
    }

    /// The size of file `name` of `job`, if it is kept.
    pub(super) async fn size(&self, job: JobId, name: &str) -> Option<u64> {
        match self.bucket.head(&self.path(job, name)).await {
            Ok(meta) => Some(meta.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(error) => {
                tracing::warn!(%error, job.id = %job, "a kept file could not be looked up in the bucket");
                None
            }
        }
    }

    /// Bytes `start` up to `end` of file `name` of `job`, as they come.
    pub(super) async fn read(
        &self,
        job: JobId,
        name: &str,
        start: u64,
        end: u64,
    ) -> std::io::Result<BoxStream<'static, std::io::Result<Bytes>>> {
        if start >= end {
            return Ok(futures_util::stream::empty().boxed());
        }
        let options = GetOptions { range: Some(GetRange::Bounded(start..end)), ..GetOptions::default() };
        let found = self.bucket.get_opts(&self.path(job, name), options).await.map_err(|error| match error {
            object_store::Error::NotFound { .. } => std::io::Error::new(std::io::ErrorKind::NotFound, error),
            error => std::io::Error::other(error),
        })?;
        Ok(found.into_stream().map_err(std::io::Error::other).boxed())
    }

    /// Removes the files of `job`.
    pub(super) async fn remove(&self, job: JobId) -> Result<(), object_store::Error> {
        let listed = self.bucket.list(Some(&self.folder(job))).map_ok(|meta| meta.location).boxed();
        let mut removed = self.bucket.delete_stream(listed);
        while let Some(gone) = removed.next().await {
            match gone {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// The jobs with files in the bucket none of which changed for `age`.
    pub(super) async fn folders_older_than(&self, age: std::time::Duration) -> Result<Vec<JobId>, object_store::Error> {
        let prefix = (!self.prefix.is_empty()).then(|| ObjectPath::from(self.prefix.trim_end_matches('/')));
        let mut listed = self.bucket.list(prefix.as_ref());
        let mut newest = std::collections::HashMap::<JobId, chrono::DateTime<chrono::Utc>>::new();
        while let Some(meta) = listed.next().await {
            let meta = meta?;
            let relative = meta.location.as_ref().strip_prefix(self.prefix.as_str()).unwrap_or_default();
            let Some(job) = relative.split_once('/').and_then(|(folder, _)| JobId::parse(folder)) else { continue };
            let seen = newest.entry(job).or_insert(meta.last_modified);
            *seen = (*seen).max(meta.last_modified);
        }
        let before = chrono::Utc::now() - chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
        Ok(newest.into_iter().filter(|(_, at)| *at <= before).map(|(job, _)| job).collect())
    }

    /// The bucket's mark of the database it belongs to, if it has one.
    pub(super) async fn mark(&self) -> Result<Option<String>, object_store::Error> {
        match self.bucket.get(&ObjectPath::from(format!("{}.database", self.prefix))).await {
            Ok(found) => Ok(Some(String::from_utf8_lossy(&found.bytes().await?).trim().to_owned())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Marks the bucket as `identity`'s.
    pub(super) async fn set_mark(&self, identity: &str) -> Result<(), object_store::Error> {
        let payload = PutPayload::from(identity.to_owned());
        self.bucket.put(&ObjectPath::from(format!("{}.database", self.prefix)), payload).await.map(|_| ())
    }
}
