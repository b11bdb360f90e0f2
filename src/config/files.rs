//! `[files]`: where the files a provider's output holds (an image, a video,
//! a sound) are kept; and `[tasks.NAME.files]`: what a task's files may be.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// `[files]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilesSettings {
    /// The directory the files are kept in. By default `onejob-files`
    /// beside a SQLite database's file, and in the working directory for
    /// a Postgres database.
    pub dir: Option<PathBuf>,
    /// Hosts a file's URL may name although they are not public: `http://`
    /// is allowed for them and their addresses may be private or loopback
    /// (as `webhooks.allow_hosts` for webhooks).
    pub allow_hosts: Vec<String>,
    /// An S3-compatible bucket the files are kept in instead, `dir` then
    /// holding each only until it is uploaded: for several replicas (each
    /// serves every file), or a store of its own.
    pub s3: Option<S3Settings>,
}

/// `[files.s3]`: an S3-compatible bucket (AWS S3, MinIO, Ceph, R2…).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct S3Settings {
    /// The bucket, which must exist.
    pub bucket: String,
    /// The store's endpoint; by default AWS S3's for `region`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The region.
    #[serde(default = "default_region")]
    pub region: String,
    /// The folder of the bucket the files go under (`onejob/`), or none.
    #[serde(default)]
    pub prefix: String,
    /// Whether an `http://` endpoint may be used (a store on this
    /// machine or a private network).
    #[serde(default)]
    pub allow_http: bool,
    /// The environment variable holding the access key id.
    #[serde(default = "default_access_key_env")]
    pub access_key_env: String,
    /// The environment variable holding the secret access key.
    #[serde(default = "default_secret_key_env")]
    pub secret_key_env: String,
}

impl S3Settings {
    /// What serde cannot check.
    pub fn check(&self) -> Result<(), String> {
        if self.bucket.is_empty() {
            return Err("files.s3.bucket: name the bucket".into());
        }
        if let Some(endpoint) = &self.endpoint {
            let http = endpoint.starts_with("http://");
            if !(endpoint.starts_with("https://") || http) {
                return Err(format!("files.s3.endpoint: an http(s) URL, not '{endpoint}'"));
            }
            if http && !self.allow_http {
                return Err("files.s3.endpoint: an http:// endpoint needs allow_http = true".into());
            }
        }
        let prefix = self.prefix.trim_end_matches('/');
        if self.prefix.starts_with('/') || prefix.split('/').any(|part| part == "." || part == "..") {
            return Err(format!(
                "files.s3.prefix: a folder of the bucket (no leading '/', '.' or '..'), not '{}'",
                self.prefix
            ));
        }
        Ok(())
    }
}

fn default_region() -> String {
    "us-east-1".to_owned()
}

fn default_access_key_env() -> String {
    "AWS_ACCESS_KEY_ID".to_owned()
}

fn default_secret_key_env() -> String {
    "AWS_SECRET_ACCESS_KEY".to_owned()
}

impl FilesSettings {
    /// The directory in force, for the database at `database_url`.
    pub fn dir_for(&self, database_url: &str) -> PathBuf {
        if let Some(dir) = &self.dir {
            return dir.clone();
        }
        let beside = database_url
            .strip_prefix("sqlite://")
            .map(|rest| rest.split('?').next().unwrap_or_default())
            .filter(|path| !path.is_empty() && *path != ":memory:")
            .and_then(|path| Path::new(path).parent().map(Path::to_path_buf));
        beside.unwrap_or_default().join("onejob-files")
    }
}

/// `[tasks.NAME.files]`: the task's output holds files, each a `data:` URI
/// (as a Cog server without an upload URL answers) that onejob keeps and
/// names by its own URL in the job's result.
#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileRules {
    /// The media types a file may have: exact (`image/png`) or a family
    /// (`image/*`).
    #[serde(default = "default_types")]
    pub types: Vec<String>,
    /// The fewest bytes a file may have.
    #[serde(default = "default_min_bytes")]
    pub min_bytes: u64,
    /// The most bytes a file may have (a prediction, files inline, is read
    /// up to 64 MiB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// The fewest files an output may hold.
    #[serde(default = "default_min_files")]
    pub min_files: u32,
    /// The most files an output may hold; a budget's worst case counts
    /// them (without it, `min_files`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files: Option<u32>,
}

impl FileRules {
    /// Whether a file of media type `media_type` may be kept.
    pub fn allows(&self, media_type: &str) -> bool {
        let media_type = media_type.to_ascii_lowercase();
        self.types.iter().any(|allowed| match allowed.strip_suffix("/*") {
            Some(family) => media_type.split_once('/').is_some_and(|(kind, _)| kind == family),
            None => *allowed == media_type,
        })
    }

    /// What serde cannot check; `task` names the task in the message.
    pub fn check(&self, task: &str) -> Result<(), String> {
        if self.types.is_empty() {
            return Err(format!("tasks.{task}.files.types must name at least one media type"));
        }
        if let Some(bad) =
            self.types.iter().find(|t| t.split_once('/').is_none_or(|(a, b)| a.is_empty() || b.is_empty()))
        {
            return Err(format!("tasks.{task}.files.types: '{bad}' is not a media type (type/subtype, or type/*)"));
        }
        if self.max_bytes == 0 || self.min_bytes > self.max_bytes {
            return Err(format!("tasks.{task}.files: max_bytes must be at least 1 and at least min_bytes"));
        }
        if self.max_files.is_some_and(|most| most == 0 || most < self.min_files) {
            return Err(format!("tasks.{task}.files: max_files must be at least 1 and at least min_files"));
        }
        Ok(())
    }
}

fn default_types() -> Vec<String> {
    ["image/*", "video/*", "audio/*"].map(str::to_owned).to_vec()
}

fn default_min_bytes() -> u64 {
    1
}

fn default_max_bytes() -> u64 {
    32 * 1024 * 1024
}

fn default_min_files() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_dir_is_beside_a_sqlite_file_and_types_match_exactly_or_by_family() {
        let settings = FilesSettings::default();
        assert_eq!(settings.dir_for("sqlite:///var/lib/onejob/onejob.db"), Path::new("/var/lib/onejob/onejob-files"));
        assert_eq!(settings.dir_for("sqlite://onejob.db?mode=rwc"), Path::new("onejob-files"));
        assert_eq!(settings.dir_for("postgres://db/onejob"), Path::new("onejob-files"));
        let rules: FileRules = toml::from_str("types = [\"image/*\", \"video/mp4\"]").unwrap();
        assert!(rules.allows("image/png") && rules.allows("IMAGE/webp") && rules.allows("video/mp4"));
        assert!(!rules.allows("video/webm") && !rules.allows("text/html") && !rules.allows("image"));
        assert!(rules.check("t").is_ok());
        let bad_counts = ["max_files = 0", "min_files = 3\nmax_files = 2"];
        for bad in ["types = []", "types = [\"png\"]", "max_bytes = 0", "min_bytes = 9\nmax_bytes = 8"]
            .into_iter()
            .chain(bad_counts)
        {
            assert!(toml::from_str::<FileRules>(bad).unwrap().check("t").is_err(), "{bad}");
        }
        let bucket = |text: &str| toml::from_str::<S3Settings>(&format!("bucket = \"b\"\n{text}")).unwrap().check();
        assert!(bucket("endpoint = \"https://s3.example.com\"\nprefix = \"onejob/\"").is_ok());
        assert!(bucket("endpoint = \"http://127.0.0.1:9000\"\nallow_http = true").is_ok());
        for bad in [
            "endpoint = \"http://127.0.0.1:9000\"",
            "endpoint = \"s3.example.com\"",
            "prefix = \"/a\"",
            "prefix = \"a/../b\"",
        ] {
            assert!(bucket(bad).is_err(), "{bad}");
        }
    }
}
