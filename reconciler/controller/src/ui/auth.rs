//! Who may use `enoki ui`'s server. Every request must name `127.0.0.1:<port>` or
//! `localhost:<port>` as its Host (another name is a DNS-rebinding page). The API (`/api/…`)
//! also needs the token printed with the address: the page keeps it in its origin's
//! `localStorage` (the origin includes the port, so no other local server can read it) and
//! sends it in the `X-Enoki-Token` header — which no other origin can set without a CORS
//! preflight, and none is answered — or, for the event stream only (`EventSource` sends no
//! header), in the query. No cookie: cookies are shared by every port of a host. Pure,
//! except [`token`].

/// The header that carries the token.
pub const HEADER: &str = "x-enoki-token";

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve it.
    Allow,
    /// A Host other than loopback with our port.
    BadHost,
    /// An API request without the token, or with a wrong one.
    NoToken,
}

/// A new token: 32 random bytes, hex.
///
/// # Errors
/// The system's random source failed.
pub fn token() -> anyhow::Result<String> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    Ok(hex::encode(bytes))
}

/// Whether a request for `path` with this Host header, token header and query may be served.
pub fn check(
    token: &str,
    port: u16,
    path: &str,
    host: Option<&str>,
    header: Option<&str>,
    query: Option<&str>,
) -> Decision {
    let mut loopback = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    if port == 80 {
        // Browsers leave the default port out of the Host header.
        loopback.extend(["127.0.0.1".to_string(), "localhost".to_string()]);
    }
    if !host.is_some_and(|h| loopback.iter().any(|l| l.eq_ignore_ascii_case(h))) {
        return Decision::BadHost;
    }
    if !path.starts_with("/api/") {
        // The page, its script and style: no cluster data.
        return Decision::Allow;
    }
    let given = |t: &str| same(t.as_bytes(), token.as_bytes());
    let in_query = path == "/api/watch"
        && query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .any(|kv| kv.strip_prefix("token=").is_some_and(given));
    if header.is_some_and(given) || in_query {
        Decision::Allow
    } else {
        Decision::NoToken
    }
}

/// Equal, in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_the_api_with_the_token_are_served() {
        let t = "abc123";
        let host = Some("127.0.0.1:80");
        assert_eq!(check(t, 80, "/", host, None, None), Decision::Allow);
        assert_eq!(
            check(t, 80, "/api/fleet", host, Some("abc123"), None),
            Decision::Allow
        );
        let local = Some("localhost:80");
        assert_eq!(
            check(t, 80, "/api/fleet", local, Some("abc123"), None),
            Decision::Allow
        );
        assert_eq!(
            check(t, 80, "/", Some("localhost"), None, None),
            Decision::Allow
        );
        assert_eq!(
            check(t, 81, "/", Some("localhost"), None, None),
            Decision::BadHost
        );
        // A rebinding page's Host, another port, no Host: refused, even for the page.
        for h in [Some("evil.example:80"), Some("127.0.0.1:81"), None] {
            assert_eq!(
                check(t, 80, "/", h, Some("abc123"), None),
                Decision::BadHost
            );
        }
        // The API without the token, with a wrong one, or in the query of another path.
        assert_eq!(
            check(t, 80, "/api/fleet", host, None, None),
            Decision::NoToken
        );
        assert_eq!(
            check(t, 80, "/api/fleet", host, Some("abc12"), None),
            Decision::NoToken
        );
        let q = Some("token=abc123");
        assert_eq!(check(t, 80, "/api/fleet", host, None, q), Decision::NoToken);
        assert_eq!(check(t, 80, "/api/watch", host, None, q), Decision::Allow);
        assert_eq!(token().unwrap().len(), 64);
        assert_ne!(token().unwrap(), token().unwrap());
    }
}
