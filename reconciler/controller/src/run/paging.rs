//! Lists read page by page: a collection a tenant controls (inputs, Compositions, Namespaces)
//! is never held whole as one response, and one that passes its byte bound is refused while
//! it is read, not after.

use std::future::Future;

use kube::api::{ListParams, ObjectList};

/// Objects per page (a page of 1 MiB Secrets is 50 MiB).
pub(crate) const PAGE: u32 = 50;

/// Why a list stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    /// What was kept passed `max_bytes` (the bytes kept so far).
    TooLarge(usize),
    /// The API server refused a page.
    Api(kube::Error),
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::TooLarge(n) => write!(f, "over its bound ({n} bytes read)"),
            Stop::Api(e) => e.fmt(f),
        }
    }
}

/// Lists with `fetch` page by page (`lp` with a limit of [`PAGE`] and the continue token of
/// the page before), keeping what `keep` makes of each object with its size in bytes, until
/// the kept sizes pass `max_bytes` (0: no bound).
///
/// # Errors
/// [`Stop`]: over the bound, or a page refused.
pub(crate) async fn list_bounded<K, T, F, Fut>(
    lp: &ListParams,
    max_bytes: usize,
    mut fetch: F,
    mut keep: impl FnMut(K) -> Option<(T, usize)>,
) -> Result<Vec<T>, Stop>
where
    K: Clone,
    F: FnMut(ListParams) -> Fut,
    Fut: Future<Output = Result<ObjectList<K>, kube::Error>>,
{
    let mut lp = lp.clone().limit(PAGE);
    let (mut out, mut bytes) = (Vec::new(), 0_usize);
    loop {
        let page = fetch(lp.clone()).await.map_err(Stop::Api)?;
        for o in page.items {
            if let Some((t, size)) = keep(o) {
                bytes = bytes.saturating_add(size);
                if max_bytes > 0 && bytes > max_bytes {
                    return Err(Stop::TooLarge(bytes));
                }
                out.push(t);
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ListMeta;

    fn page(items: Vec<u32>, next: Option<&str>) -> ObjectList<u32> {
        ObjectList {
            types: Default::default(),
            metadata: ListMeta {
                continue_: next.map(str::to_string),
                ..ListMeta::default()
            },
            items,
        }
    }

    #[tokio::test]
    async fn pages_are_followed_and_a_bound_stops_the_read() {
        let pages = |lp: ListParams| async move {
            assert_eq!(lp.limit, Some(PAGE));
            Ok(match lp.continue_token.as_deref() {
                None => page(vec![1, 2], Some("b")),
                Some("b") => page(vec![3], Some("")),
                Some(other) => panic!("{other}"),
            })
        };
        let all = list_bounded(&ListParams::default(), 0, pages, |n| Some((n, 10)))
            .await
            .unwrap();
        assert_eq!(all, [1, 2, 3]);
        let odd = list_bounded(&ListParams::default(), 0, pages, |n| {
            (n % 2 == 1).then_some((n, 1))
        })
        .await
        .unwrap();
        assert_eq!(odd, [1, 3]);
        match list_bounded(&ListParams::default(), 25, pages, |n| Some((n, 10))).await {
            Err(Stop::TooLarge(30)) => {}
            other => panic!("{other:?}"),
        }
    }
}
