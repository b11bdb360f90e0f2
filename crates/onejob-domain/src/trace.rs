//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the
//! `traceparent` and `tracestate` a caller sends with `POST /jobs` or
//! `POST /jobs/{id}/attempts` are kept with the attempt they ask for, so
//! that the work done for it later, in a worker of any replica, stays in
//! the caller's trace, and the provider call carries it onward.
//!
//! `traceparent` is `version-traceid-parentid-flags`: `00`, 32 and 16
//! lowercase hex digits (neither all zeros) and 2 of flags. A header that
//! does not parse is ignored, as the specification says (the request then
//! starts no trace of its own here). `tracestate` is kept as sent, when it
//! is at most 512 characters of printable ASCII, and only with a valid
//! `traceparent`.

use serde::{Deserialize, Serialize};

/// The most of `tracestate` kept: the specification's limit on what a
/// vendor must propagate.
const MAX_TRACESTATE: usize = 512;

/// A caller's trace context, as received.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TraceContext {
    /// `00-<trace id>-<parent id>-<flags>`.
    pub traceparent: String,
    /// Vendors' entries, passed on unchanged.
    pub tracestate: Option<String>,
}

fn is_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl TraceContext {
    /// The context of the headers' values, when `traceparent` is valid.
    pub fn from_headers(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<Self> {
        let traceparent = traceparent?.trim();
        // Version 00 is exactly 55 characters; a later version starts with
        // the same fields and may add more after a dash.
        let head = traceparent.get(..55)?;
        let rest = &traceparent[55..];
        let parts: Vec<&str> = head.split('-').collect();
        let [version, trace_id, parent_id, flags] = parts[..] else { return None };
        let valid = version.len() == 2
            && is_hex(version)
            && version != "ff"
            && (version != "00" || rest.is_empty())
            && (version == "00" || rest.is_empty() || rest.starts_with('-'))
            && trace_id.len() == 32
            && is_hex(trace_id)
            && trace_id.bytes().any(|b| b != b'0')
            && parent_id.len() == 16
            && is_hex(parent_id)
            && parent_id.bytes().any(|b| b != b'0')
            && flags.len() == 2
            && is_hex(flags);
        if !valid {
            return None;
        }
        let tracestate = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE && s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        // What is passed on is the version this code speaks.
        Some(Self { traceparent: format!("00-{trace_id}-{parent_id}-{flags}"), tracestate })
    }

    /// The trace id: 32 hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The `traceparent` of a call made on behalf of this context: the same
    /// trace and flags, a new parent id (the call's own span).
    pub fn child(&self) -> String {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("the operating system's random source");
        if bytes == [0; 8] {
            bytes[7] = 1;
        }
        let span: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("00-{}-{span}-{}", self.trace_id(), &self.traceparent[53..55])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_and_an_invalid_one_ignored() {
        let context = TraceContext::from_headers(Some(VALID), Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(
            (context.trace_id(), context.tracestate.as_deref()),
            ("4bf92f3577b34da6a3ce929d0e0e4736", Some("congo=t61rcWkgMzE"))
        );
        for invalid in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(TraceContext::from_headers(Some(invalid), None), None, "{invalid}");
        }
        let later = TraceContext::from_headers(Some(&format!("01{}-what-comes-next", &VALID[2..])), None).unwrap();
        assert_eq!(later.traceparent, VALID, "a later version is read as 00");
        let later_bare = TraceContext::from_headers(Some(&format!("01{}", &VALID[2..])), None).unwrap();
        assert_eq!(later_bare.traceparent, VALID, "a later version may add nothing");
        let glued = format!("01{}extra", &VALID[2..]);
        assert_eq!(TraceContext::from_headers(Some(&glued), None), None, "what a later version adds follows a dash");
        let long = "a=".to_owned() + &"b".repeat(600);
        assert_eq!(TraceContext::from_headers(Some(VALID), Some(&long)).unwrap().tracestate, None);
        assert_eq!(TraceContext::from_headers(None, Some("a=b")), None, "no tracestate without a traceparent");
    }

    #[test]
    fn a_child_keeps_the_trace_and_flags_with_a_parent_of_its_own() {
        let context = TraceContext::from_headers(Some(VALID), None).unwrap();
        let child = TraceContext::from_headers(Some(&context.child()), None).unwrap();
        assert_eq!(child.trace_id(), context.trace_id());
        assert_eq!(&child.traceparent[53..], "01");
        assert_ne!(child.traceparent, context.traceparent);
    }

    #[test]
    fn every_byte_of_a_childs_parent_id_is_random() {
        let context = TraceContext::from_headers(Some(VALID), None).unwrap();
        let parents: Vec<String> = (0..32).map(|_| context.child()[36..52].to_owned()).collect();
        // 32 draws all alike in one byte: a chance of 2⁻²⁴⁸ per byte.
        for byte in 0..8 {
            let hex = |parent: &String| parent[2 * byte..2 * byte + 2].to_owned();
            assert!(parents.iter().any(|parent| hex(parent) != hex(&parents[0])), "byte {byte} never changes");
        }
    }
}
