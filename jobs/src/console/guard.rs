//! Who may use the console: the token or loopback check every request passes, the
//! CSRF token every action carries, and the headers every response gets.
//!
//! # Ground rules
//!
//! - [`check`] wraps every route (the router's outermost layer), so no route can forget it.
//! - Without a token a request is served only if it is addressed to a loopback host (the
//!   `Host` a browser sends names the page's site, which defeats DNS rebinding) and, when
//!   the server recorded the peer (`ConnectInfo<SocketAddr>`, as `wheel-jobs serve` does),
//!   it came from a loopback peer. `Host` alone is what a client says: a reverse proxy on
//!   the same machine forwards anyone's request from a loopback peer with any `Host`, so a
//!   token-less request that carries a proxy's headers (`Forwarded`, `X-Forwarded-For`,
//!   `X-Real-IP`) is refused: a proxied console needs a token.
//! - Secrets are compared in time independent of where they differ ([`same`]).
//! - The CSRF token is not a secret from the user (it is in every page), only from other
//!   sites, which cannot read the console's pages. With a console token it is derived from
//!   it (HMAC-SHA-256 of a fixed label, keyed by the token, 128 bits shown), so every
//!   replica behind a load balancer, and a restarted console, accept each other's forms,
//!   and the page does not reveal the token. Without one it is 128 random bits per router
//!   from the operating system.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use std::sync::Arc;

/// Pages load only what the console serves itself: no inline script or style, no frame
/// around them (clickjacking of the action buttons), forms post only to the console.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(super) struct Guard {
    token: Option<Arc<str>>,
    any_host: bool,
    csrf: String,
}

impl Guard {
    pub(super) fn new(token: Option<Arc<str>>, any_host: bool) -> Guard {
        let mut bytes = [0u8; 16];
        match &token {
            Some(token) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(token.as_bytes())
                    .expect("HMAC takes a key of any length");
                mac.update(b"wheel-jobs console csrf v1");
                bytes.copy_from_slice(&mac.finalize().into_bytes()[..16]);
            }
            // Without OS randomness there is no safe CSRF token; every platform tokio runs
            // on has it, so a failure here is a broken system, not an input to handle.
            None => getrandom::fill(&mut bytes)
                .expect("wheel-jobs console: no OS randomness for the CSRF token"),
        }
        let csrf = bytes.iter().map(|b| format!("{b:02x}")).collect();
        Guard {
            token,
            any_host,
            csrf,
        }
    }

    /// The token every action form carries.
    pub(super) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether `given` (a form's `csrf` field) is this router's CSRF token.
    pub(super) fn csrf_ok(&self, given: &str) -> bool {
        same(given.as_bytes(), self.csrf.as_bytes())
    }

    fn admit(&self, request: &Request) -> Result<(), Refusal> {
        match &self.token {
            Some(token) => {
                let given = request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(presented_token);
                match given {
                    Some(given) if same(given.as_bytes(), token.as_bytes()) => Ok(()),
                    _ => Err(Refusal::NoToken),
                }
            }
            None if self.any_host => Ok(()),
            None if is_proxied(request.headers()) => Err(Refusal::Proxied),
            None if is_loopback(host(request)) && from_loopback(request) => Ok(()),
            None => Err(Refusal::ForeignHost),
        }
    }
}

/// Whether a request passed through a reverse proxy that said so: the peer the server sees
/// is then the proxy, not the client.
fn is_proxied(headers: &HeaderMap) -> bool {
    let forwarded = [header::FORWARDED.as_str(), "x-forwarded-for", "x-real-ip"];
    forwarded.into_iter().any(|name| headers.contains_key(name))
}

/// Whether the peer the server recorded is on this machine; `true` when the server
/// recorded none (a router served without `ConnectInfo`, where only `Host` can be checked).
fn from_loopback(request: &Request) -> bool {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .is_none_or(|ConnectInfo(peer)| peer.ip().to_canonical().is_loopback())
}

/// Why the guard turned a request away.
enum Refusal {
    NoToken,
    ForeignHost,
    Proxied,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::NoToken => (
                StatusCode::UNAUTHORIZED,
                [(
                    header::WWW_AUTHENTICATE,
                    r#"Basic realm="wheel-jobs", charset="UTF-8""#,
                )],
                "this console needs its token: as the password of HTTP Basic \
                 authentication, or as `Authorization: Bearer <token>`\n",
            )
                .into_response(),
            Refusal::ForeignHost => (
                StatusCode::FORBIDDEN,
                "this console has no token, so it answers only requests to a loopback \
                 host (localhost, 127.0.0.1, [::1]) from this machine; give it a token to \
                 serve others\n",
            )
                .into_response(),
            Refusal::Proxied => (
                StatusCode::FORBIDDEN,
                "this console has no token, and this request came through a proxy \
                 (Forwarded, X-Forwarded-For or X-Real-IP), which makes anyone look local; \
                 give the console a token to serve it behind a proxy\n",
            )
                .into_response(),
        }
    }
}

/// The guard as a middleware: refuses what [`Guard::admit`] refuses, and adds the security
/// headers to every response.
pub(super) async fn check(
    State(guard): State<Arc<Guard>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match guard.admit(&request) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    };
    secure(response.headers_mut());
    response
}

fn secure(headers: &mut HeaderMap) {
    let set = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        // Pages show live state, and may show payloads: keep them out of caches.
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in set {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    }
}

/// The token in an `Authorization` header: `Bearer <token>`, or the password of
/// `Basic base64(user:password)`.
fn presented_token(authorization: &str) -> Option<String> {
    let (scheme, rest) = authorization.split_once(' ')?;
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") {
        Some(rest.to_owned())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let decoded = String::from_utf8(decoded).ok()?;
        let (_user, password) = decoded.split_once(':')?;
        Some(password.to_owned())
    } else {
        None
    }
}

/// The host a request is addressed to: `Host`, or the URI's authority (HTTP/2).
fn host(request: &Request) -> Option<&str> {
    match request.headers().get(header::HOST) {
        Some(host) => host.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    }
}

fn is_loopback(host: Option<&str>) -> bool {
    let Some(host) = host else { return false };
    let name = match host.strip_prefix('[') {
        // `[::1]:8080`
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// `a == b`, taking the same time wherever they differ (a timing side channel would let a
/// client guess a token byte by byte).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:80",
            "127.8.9.10:1",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(is_loopback(Some(host)), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1:8080",
            "[::2]:80",
            "",
        ] {
            assert!(!is_loopback(Some(host)), "{host}");
        }
        assert!(!is_loopback(None));
    }

    #[test]
    fn tokens_from_authorization_headers() {
        assert_eq!(presented_token("Bearer s3cret").as_deref(), Some("s3cret"));
        assert_eq!(
            presented_token("bearer  s3cret ").as_deref(),
            Some("s3cret")
        );
        // base64("anyone:s3:cret")
        assert_eq!(
            presented_token("Basic YW55b25lOnMzOmNyZXQ=").as_deref(),
            Some("s3:cret")
        );
        assert_eq!(presented_token("Basic !!!"), None);
        assert_eq!(presented_token("Digest s3cret"), None);
        assert_eq!(presented_token("s3cret"), None);
    }

    #[test]
    fn same_compares_whole_values() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }
}
