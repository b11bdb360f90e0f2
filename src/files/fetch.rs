//! A file a provider's output names by URL (a Cog server with an upload
//! URL, a hosted API's delivery URL), fetched once into the blob store:
//! streamed to disk, never held whole, within the task's size and media
//! types, under the address rules of webhooks (`https://` on a public
//! address, unless `files.allow_hosts` lists the host; no redirect, no
//! proxy). What cannot be fetched now (no answer, a 5xx) may be fetched
//! again; what breaks the rules never is.

use std::path::Path;
use std::time::Duration;

use reqwest::Url;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt as _;

use super::{extension, sync_new_dir};
use crate::config::FileRules;
use crate::webhooks::address::{AllowedHosts, PublicResolver, is_internal};

/// Why a file was not fetched.
pub(super) enum Fetch {
    /// It breaks the task's rules, or its URL may not be reached.
    Rejected(String),
    /// Not now: it may be fetched again.
    Again(String),
}

/// A fetched file, kept.
pub(super) struct Fetched {
    pub(super) name: String,
    pub(super) content_type: String,
    pub(super) size: u64,
    pub(super) sha256: String,
}

/// Checks a file's URL before it is fetched: `https://` with a host, no
/// user name or password, and a host written as an address a public one;
/// `http://` and any address for a host `allowed` lists. (A name is
/// checked when it is resolved, by the client's resolver.)
pub(super) fn check_url(text: &str, allowed: &AllowedHosts) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|error| format!("not a URL: {error}"))?;
    let host = url.host_str().filter(|host| !host.is_empty()).ok_or("a URL without a host")?.to_owned();
    let exempt = allowed.allows(&host);
    match url.scheme() {
        "https" => {}
        "http" if exempt => {}
        _ => return Err(format!("{host} is not in files.allow_hosts, so only an https:// URL is fetched from it")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a URL with a user name or password is not fetched".into());
    }
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>()
        && !exempt
        && is_internal(ip)
    {
        return Err(format!("{ip} is a private, loopback or link-local address, not in files.allow_hosts"));
    }
    Ok(url)
}

/// The client files are fetched with: through the resolver that refuses
/// internal addresses, following no redirect and no proxy.
pub(super) fn client(allowed: &AllowedHosts) -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .dns_resolver(std::sync::Arc::new(PublicResolver::new(allowed.clone())))
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

/// Fetches `url` into `dir` as `{stem}.{extension}`, by `rules`.
pub(super) async fn fetch_to(
    client: &reqwest::Client,
    url: &Url,
    dir: &Path,
    stem: &str,
    rules: &FileRules,
) -> Result<Fetched, Fetch> {
    let shown = format!("{}://{}{}", url.scheme(), url.host_str().unwrap_or_default(), url.path());
    let answer =
        client.get(url.clone()).send().await.map_err(|e| Fetch::Again(format!("{shown} was not answered: {e}")))?;
    let status = answer.status();
    if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
        return Err(Fetch::Again(format!("{shown} answered {status}")));
    }
    if !status.is_success() {
        return Err(Fetch::Rejected(format!("{shown} answered {status} (a redirect is not followed)")));
    }
    let content_type = answer
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map_or_else(|| "application/octet-stream".to_owned(), |v| v.trim().to_ascii_lowercase());
    if !rules.allows(&content_type) {
        let types = rules.types.join(", ");
        return Err(Fetch::Rejected(format!(
            "{shown} is of type {content_type}, which the task does not take ({types})"
        )));
    }
    if answer.content_length().is_some_and(|length| length > rules.max_bytes) {
        return Err(Fetch::Rejected(format!("{shown} is over the task's {} bytes", rules.max_bytes)));
    }
    let name = format!("{stem}.{}", extension(&content_type));
    let (size, sha256) = stream_into(answer, dir, &name, rules.max_bytes, &shown).await?;
    if size < rules.min_bytes {
        let _ = tokio::fs::remove_file(dir.join(&name)).await;
        return Err(Fetch::Rejected(format!("{shown} has {size} bytes, under the task's {}", rules.min_bytes)));
    }
    Ok(Fetched { name, content_type, size, sha256 })
}

/// A file removed when dropped, unless taken out first.
struct RemovedOnDrop(Option<std::path::PathBuf>);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Streams `answer`'s body into `dir/name`, whole or not at all, at most
/// `max` bytes: its size and SHA-256.
async fn stream_into(
    answer: reqwest::Response,
    dir: &Path,
    name: &str,
    max: u64,
    shown: &str,
) -> Result<(u64, String), Fetch> {
    let io = |e: std::io::Error| Fetch::Again(format!("the blob store could not be written: {e}"));
    sync_new_dir(dir).await.map_err(io)?;
    let partial = dir.join(format!(".{name}.{}.partial", uuid::Uuid::now_v7().simple()));
    // Removed however this ends but whole (an error, the caller dropped).
    let mut partial_left = RemovedOnDrop(Some(partial.clone()));
    let mut file = tokio::fs::File::create(&partial).await.map_err(io)?;
    let (mut size, mut hasher) = (0u64, Sha256::new());
    let mut answer = answer;
    let outcome = loop {
        match answer.chunk().await {
            Ok(None) => break Ok(()),
            Err(e) => break Err(Fetch::Again(format!("{shown} broke off: {e}"))),
            Ok(Some(chunk)) => {
                size += chunk.len() as u64;
                if size > max {
                    break Err(Fetch::Rejected(format!("{shown} is over the task's {max} bytes")));
                }
                hasher.update(&chunk);
                if let Err(e) = file.write_all(&chunk).await {
                    break Err(io(e));
                }
            }
        }
    };
    let kept = async {
        outcome?;
        file.sync_all().await.map_err(io)?;
        tokio::fs::rename(&partial, dir.join(name)).await.map_err(io)?;
        let dir = dir.to_owned();
        let synced = tokio::task::spawn_blocking(move || std::fs::File::open(dir).and_then(|d| d.sync_all())).await;
        synced.map_err(|e| io(std::io::Error::other(e.to_string())))?.map_err(io)
    };
    match kept.await {
        Ok(()) => {
            partial_left.0 = None;
            Ok((size, hex::encode(hasher.finalize())))
        }
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server on loopback answering every request with `answer`; how
    /// many connections it took.
    async fn answering(answer: String) -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let taken = Arc::new(AtomicUsize::new(0));
        let counted = taken.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let mut head = vec![0; 16 * 1024];
                let _ = stream.read(&mut head).await;
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        (port, taken)
    }

    #[tokio::test]
    async fn a_file_whose_url_redirects_is_rejected_and_the_redirect_not_followed() {
        let png = "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 4\r\n\r\n\u{89}PNG";
        let (elsewhere, asked_elsewhere) = answering(png.to_owned()).await;
        let moved = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{elsewhere}/out.png\r\nContent-Length: 0\r\n\r\n"
        );
        let (origin, asked_origin) = answering(moved).await;
        let allowed = AllowedHosts::new(&["127.0.0.1".to_owned()]);
        let url = check_url(&format!("http://127.0.0.1:{origin}/out.png"), &allowed).unwrap();
        let dir = std::env::temp_dir().join(format!("onejob-fetch-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules: FileRules = toml::from_str("types = [\"image/png\"]").unwrap();
        let fetched = fetch_to(&client(&allowed), &url, &dir, "out", &rules).await;
        let _ = std::fs::remove_dir_all(&dir);
        match fetched {
            Err(Fetch::Rejected(why)) => assert!(why.contains("302") && why.contains("not followed"), "{why}"),
            Err(Fetch::Again(why)) => panic!("rejected for good, not to try again: {why}"),
            Ok(_) => panic!("a redirect was followed"),
        }
        assert_eq!(asked_origin.load(Ordering::SeqCst), 1);
        assert_eq!(asked_elsewhere.load(Ordering::SeqCst), 0, "the redirect's target was never asked");
    }
}
