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
        for bad in ["types = []", "types = [\"png\"]", "max_bytes = 0", "min_bytes = 9\nmax_bytes = 8"] {
            assert!(toml::from_str::<FileRules>(bad).unwrap().check("t").is_err(), "{bad}");
        }
    }
}
