//! Who may use `enoki ui`'s server: requests to `127.0.0.1:<port>` or `localhost:<port>` only
//! (another Host is a DNS-rebinding page), carrying the token printed with the address — in
//! the query the first time, then in a cookie (`HttpOnly`, `SameSite=Strict`) named after the
//! port, so two `enoki ui` on one machine do not mix. Pure, except [`token`].

/// What to do with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Serve it; `set_cookie` when the token came in the query.
    Allow { set_cookie: bool },
    /// A Host other than loopback with our port.
    BadHost,
    /// No token, or a wrong one.
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

/// The cookie that carries the token for the server on `port`.
pub fn cookie_name(port: u16) -> String {
    format!("enoki-ui-{port}")
}

/// The `Set-Cookie` value for `token`.
pub fn set_cookie(port: u16, token: &str) -> String {
    format!(
        "{}={token}; Path=/; HttpOnly; SameSite=Strict",
        cookie_name(port)
    )
}

/// Whether a request with this Host header, query and Cookie header may be served.
pub fn check(
    token: &str,
    port: u16,
    host: Option<&str>,
    query: Option<&str>,
    cookies: Option<&str>,
) -> Decision {
    let loopback = [format!("127.0.0.1:{port}"), format!("localhost:{port}")];
    if !host.is_some_and(|h| loopback.iter().any(|l| l.eq_ignore_ascii_case(h))) {
        return Decision::BadHost;
    }
    let from_query = query.into_iter().flat_map(|q| q.split('&')).any(|kv| {
        kv.strip_prefix("token=")
            .is_some_and(|t| same(t.as_bytes(), token.as_bytes()))
    });
    if from_query {
        return Decision::Allow { set_cookie: true };
    }
    let name = cookie_name(port);
    let from_cookie = cookies
        .into_iter()
        .flat_map(|c| c.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .any(|(k, v)| k == name && same(v.as_bytes(), token.as_bytes()));
    if from_cookie {
        Decision::Allow { set_cookie: false }
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
    fn only_loopback_with_the_token_is_served() {
        let t = "abc123";
        let ok = Decision::Allow { set_cookie: true };
        assert_eq!(
            check(t, 80, Some("127.0.0.1:80"), Some("token=abc123"), None),
            ok
        );
        assert_eq!(
            check(t, 80, Some("localhost:80"), Some("x=1&token=abc123"), None),
            ok
        );
        // A rebinding page's Host, another port, no Host.
        for host in [Some("evil.example:80"), Some("127.0.0.1:81"), None] {
            assert_eq!(
                check(t, 80, host, Some("token=abc123"), None),
                Decision::BadHost
            );
        }
        assert_eq!(
            check(t, 80, Some("127.0.0.1:80"), Some("token=abc12"), None),
            Decision::NoToken
        );
        assert_eq!(
            check(t, 80, Some("127.0.0.1:80"), None, None),
            Decision::NoToken
        );
        let jar = "a=b; enoki-ui-80=abc123";
        assert_eq!(
            check(t, 80, Some("127.0.0.1:80"), None, Some(jar)),
            Decision::Allow { set_cookie: false }
        );
        // Another server's cookie does not open this one.
        assert_eq!(
            check(t, 81, Some("127.0.0.1:81"), None, Some(jar)),
            Decision::NoToken
        );
        assert_eq!(token().unwrap().len(), 64);
        assert_ne!(token().unwrap(), token().unwrap());
    }
}
