//! Which addresses a webhook may be sent to. An endpoint's URL is set by a
//! user, so it must not reach the service's own network: it is `https://`
//! on a public address, unless its host is listed in
//! `webhooks.allow_hosts`. The check is made when the endpoint is
//! registered (the URL's form and every address its host resolves to) and
//! again on every send, by the resolver the sending client connects
//! through, so that a name that later resolves to a private address is
//! refused too. That client connects directly, never through a proxy the
//! environment names (`HTTPS_PROXY`), and follows no redirect.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;

/// Why a URL may not be an endpoint.
pub(crate) type Refusal = String;

/// The hosts exempt from the checks.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts {
    hosts: Arc<Vec<String>>,
    every: bool,
}

impl AllowedHosts {
    /// From `webhooks.allow_hosts`.
    pub fn new(hosts: &[String]) -> Self {
        let hosts = hosts.iter().map(|host| host.trim_matches(['[', ']']).to_ascii_lowercase()).collect();
        Self { hosts: Arc::new(hosts), every: false }
    }

    /// Every host: for a check of a URL's form alone, never for a send.
    pub(crate) fn every() -> Self {
        Self { hosts: Arc::default(), every: true }
    }

    /// Whether `host` is listed.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
        self.every || self.hosts.contains(&host)
    }
}

/// Whether an address is one a user's URL may not reach: private,
/// loopback, link-local, shared, unspecified, multicast, documentation,
/// reserved, and the other special-purpose ranges of the IANA registries.
/// An IPv6 address that carries an IPv4 one (IPv4-mapped, IPv4-translated,
/// 6to4, Teredo) is judged by the IPv4 address it carries.
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(carried) = carried_ipv4(v6) {
                return carried.into_iter().any(is_internal_v4);
            }
            let s = v6.segments();
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
                || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
                || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10
                || s[..6] == [0, 0, 0, 0, 0, 0] // IPv4-compatible ::/96
                || (s[0] == 0x0064 && s[1] == 0xff9b) // NAT64 64:ff9b::/96 and 64:ff9b:1::/48
                || s[..4] == [0x0100, 0, 0, 0] // discard-only 100::/64
                || (s[0] == 0x2001 && s[1] < 0x0200) // IETF protocol assignments 2001::/23
                || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation 2001:db8::/32
                || (s[0] & 0xfff0) == 0x3ff0 // documentation 3fff::/20
                || s[0] == 0x5f00 // segment routing 5f00::/16
                || s[..3] == [0x2620, 0x004f, 0x8000] // AS112 direct delegation 2620:4f:8000::/48
        }
    }
}

/// The IPv4 addresses an IPv6 address carries: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), 6to4
/// (`2002:aabb:ccdd::/48`), or Teredo (`2001:0::/32`: its server's
/// address, and its client's, stored inverted); `None` for any other.
fn carried_ipv4(v6: std::net::Ipv6Addr) -> Option<Vec<Ipv4Addr>> {
    let s = v6.segments();
    let v4 = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if let Some(mapped) = v6.to_ipv4_mapped() {
        return Some(vec![mapped]);
    }
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(vec![v4(s[6], s[7])]);
    }
    if s[0] == 0x2002 {
        return Some(vec![v4(s[1], s[2])]);
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some(vec![v4(s[2], s[3]), v4(!s[6], !s[7])]);
    }
    None
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments 192.0.0.0/24
        || (a == 192 && b == 31 && c == 196) // AS112 192.31.196.0/24
        || (a == 192 && b == 52 && c == 193) // AMT 192.52.193.0/24
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast 192.88.99.0/24
        || (a == 192 && b == 175 && c == 48) // AS112 direct delegation 192.175.48.0/24
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18.0.0/15
        || a >= 240 // reserved, and the limited broadcast
}

/// Checks an endpoint URL's form: `https://` with a host (`http://` too
/// for an allowed host), no user name or password, and, for a host
/// written as an address, a public one unless allowed.
pub(crate) fn check_form(text: &str, allowed: &AllowedHosts) -> Result<Url, Refusal> {
    let url = Url::parse(text).map_err(|error| format!("not a URL: {error}"))?;
    let host = url.host_str().filter(|host| !host.is_empty()).ok_or("the URL has no host")?.to_owned();
    let exempt = allowed.allows(&host);
    match url.scheme() {
        "https" => {}
        "http" if exempt => {}
        "http" => return Err("only https:// URLs may be endpoints (webhooks.allow_hosts lists the exceptions)".into()),
        other => return Err(format!("the scheme '{other}' cannot be an endpoint; use https://")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an endpoint URL may not carry a user name or password".into());
    }
    if let Ok(ip) = host.trim_matches(['[', ']']).parse::<IpAddr>()
        && !exempt
        && is_internal(ip)
    {
        return Err(format!("{ip} is a private, loopback or link-local address"));
    }
    Ok(url)
}

/// Checks an endpoint URL as [`check_form`] does, then resolves its host:
/// every address must be public, unless the host is allowed.
pub(crate) async fn check(text: &str, allowed: &AllowedHosts) -> Result<Url, Refusal> {
    let url = check_form(text, allowed)?;
    let host = url.host_str().expect("checked above").to_owned();
    if allowed.allows(&host) || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok() {
        return Ok(url);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    // One answer whatever the resolver said: what an internal name
    // resolves to, or whether it resolves at all, is not told.
    let refused = || format!("the host '{host}' does not resolve to a public address");
    let addresses: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), port)).await {
        Ok(addresses) => addresses.collect(),
        Err(error) => {
            tracing::debug!(%error, host = %host, "an endpoint's host could not be resolved");
            return Err(refused());
        }
    };
    if addresses.is_empty() || addresses.iter().any(|address| is_internal(address.ip())) {
        return Err(refused());
    }
    Ok(url)
}

/// Why the sending client's resolver gave no address.
#[derive(Debug)]
pub(crate) enum Unresolved {
    /// The name does not resolve.
    NoAddress,
    /// Every address it resolves to is internal.
    NoPublicAddress,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unresolved::NoAddress => "the host does not resolve",
            Unresolved::NoPublicAddress => "the host resolves to no public address",
        })
    }
}

impl std::error::Error for Unresolved {}

/// The sending client's resolver: a host's addresses, without the
/// internal ones unless the host is allowed; none left is an error.
pub(crate) struct PublicResolver {
    allowed: AllowedHosts,
}

impl PublicResolver {
    /// Resolves as `webhooks.allow_hosts` says.
    pub(crate) fn new(allowed: AllowedHosts) -> Self {
        Self { allowed }
    }
}

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowed = self.allowed.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
                Ok(found) => found.collect(),
                Err(_) => return Err(Box::new(Unresolved::NoAddress) as _),
            };
            let exempt = allowed.allows(&host);
            let usable: Vec<SocketAddr> =
                found.into_iter().filter(|address| exempt || !is_internal(address.ip())).collect();
            if usable.is_empty() {
                return Err(Box::new(Unresolved::NoPublicAddress) as _);
            }
            Ok(Box::new(usable.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_ranges_are_refused_and_public_ones_are_not() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "224.0.0.1",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn an_ipv6_address_carrying_an_ipv4_one_is_judged_by_it() {
        for (internal, form) in [
            ("::ffff:0:7f00:1", "IPv4-translated 127.0.0.1"),
            ("::ffff:0:a00:1", "IPv4-translated 10.0.0.1"),
            ("2002:7f00:1::", "6to4 of 127.0.0.1"),
            ("2002:a9fe:a9fe::1", "6to4 of 169.254.169.254"),
            ("2001:0:7f00:1::", "Teredo through server 127.0.0.1"),
            ("2001:0:5db8:d822:0:0:80ff:fffe", "Teredo for client 127.0.0.1 (inverted)"),
            ("::7f00:1", "IPv4-compatible, refused outright"),
            ("64:ff9b::7f00:1", "NAT64, refused outright"),
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}: {form}");
        }
        for (public, form) in [
            ("::ffff:0:808:808", "IPv4-translated 8.8.8.8"),
            ("2002:808:808::1", "6to4 of 8.8.8.8"),
            ("2001:0:5db8:d822:0:0:f7f7:f7f7", "Teredo, server 93.184.216.34, client 8.8.8.8"),
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}: {form}");
        }
    }

    #[test]
    fn the_special_purpose_ranges_are_refused() {
        for special in [
            "192.88.99.1",
            "192.31.196.1",
            "192.52.193.1",
            "192.175.48.1",
            "198.18.0.1",
            "255.255.255.255",
            "100::1",
            "2001:2::1",
            "2001:20::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "2620:4f:8000::1",
            "64:ff9b:1::1",
        ] {
            assert!(is_internal(special.parse().unwrap()), "{special}");
        }
    }

    #[test]
    fn an_endpoint_is_https_on_a_public_host_unless_allowed() {
        let none = AllowedHosts::default();
        assert!(check_form("https://hooks.example.com/in", &none).is_ok());
        assert!(check_form("http://hooks.example.com/in", &none).unwrap_err().contains("https"));
        assert!(check_form("https://10.0.0.5/in", &none).unwrap_err().contains("private"));
        assert!(check_form("https://[::1]:8443/in", &none).unwrap_err().contains("private"));
        assert!(check_form("https://user:pw@hooks.example.com/", &none).unwrap_err().contains("password"));
        assert!(check_form("ftp://hooks.example.com/", &none).unwrap_err().contains("scheme"));
        assert!(check_form("not a url", &none).is_err());
        let loopback = AllowedHosts::new(&["127.0.0.1".into()]);
        assert!(check_form("http://127.0.0.1:9000/in", &loopback).is_ok());
        assert!(check_form("http://127.0.0.2:9000/in", &loopback).is_err());
    }
}
