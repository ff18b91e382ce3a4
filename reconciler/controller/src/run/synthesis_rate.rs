//! How often a tenant may make enoki synthesize and store: token buckets per Composition and
//! per namespace (syntheses), and per namespace in bytes of ResourceSlices written. A
//! synthesis that finds a bucket empty waits (its Composition says so in `Synthesized`) and
//! the current synthesis stays enforced. The defaults are far above what a person editing a
//! Composition does; they bound a loop (`kubectl annotate … force-resynthesis=$i`, an input
//! rewritten every second) to a steady rate the API server and etcd absorb.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A rate: `per_second` tokens a second, at most `burst` saved up. `per_second == 0`: off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: f64,
}

impl Rate {
    /// Parses `N/s`, `N/m` or `N/h` (`0`: no limit); a byte rate may use quantities
    /// (`1Mi/s`).
    ///
    /// # Errors
    /// A message when the text is not such a rate.
    pub fn parse(text: &str, burst: f64) -> Result<Rate, String> {
        let text = text.trim();
        if text == "0" {
            return Ok(Rate {
                per_second: 0.0,
                burst,
            });
        }
        let (n, unit) = text
            .rsplit_once('/')
            .ok_or_else(|| format!("{text:?} is not a rate (N/s, N/m or N/h)"))?;
        let secs = match unit {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{text:?}: the unit after / is s, m or h")),
        };
        let n = match n.parse::<f64>() {
            Ok(n) => n,
            Err(_) => crate::synthesis::parse_quantity(n)? as f64,
        };
        let valid = n.is_finite() && n > 0.0 && burst.is_finite() && burst >= 1.0;
        if !valid {
            return Err(format!("{text:?}: the rate and its burst must be positive"));
        }
        Ok(Rate {
            per_second: n / secs,
            burst,
        })
    }

    /// The three rates of `enoki run`'s flags: per Composition and per namespace (rate and
    /// burst), and slice bytes per namespace (rate and burst as quantities).
    ///
    /// # Errors
    /// A message naming the flag that does not parse.
    pub fn of_flags(
        composition: (&str, u32),
        namespace: (&str, u32),
        bytes: (&str, &str),
    ) -> Result<[Rate; 3], String> {
        let bytes_burst = crate::synthesis::parse_quantity(bytes.1)
            .map_err(|e| format!("--namespace-slice-write-burst: {e}"))?;
        Ok([
            Rate::parse(composition.0, f64::from(composition.1))
                .map_err(|e| format!("--composition-synthesis-rate: {e}"))?,
            Rate::parse(namespace.0, f64::from(namespace.1))
                .map_err(|e| format!("--namespace-synthesis-rate: {e}"))?,
            Rate::parse(bytes.0, bytes_burst as f64)
                .map_err(|e| format!("--namespace-slice-write-rate: {e}"))?,
        ])
    }

    fn on(&self) -> bool {
        self.per_second > 0.0
    }
}

/// One bucket: tokens (negative: a debt) and when they were counted.
#[derive(Clone, Copy, Debug)]
struct Bucket(f64, Instant);

impl Bucket {
    fn now(self, rate: &Rate, now: Instant) -> Bucket {
        let refill = now.duration_since(self.1).as_secs_f64() * rate.per_second;
        Bucket((self.0 + refill).min(rate.burst), now)
    }

    /// How long until the bucket holds `need` tokens.
    fn wait(self, rate: &Rate, need: f64) -> Duration {
        let missing = (need - self.0).max(0.0);
        Duration::try_from_secs_f64(missing / rate.per_second).unwrap_or(Duration::from_secs(3600))
    }
}

/// Which bucket held a synthesis back, and for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct Held {
    pub wait: Duration,
    /// What was exceeded, with the flag that sets it.
    pub message: String,
}

/// The rates and the buckets of every Composition and namespace.
#[derive(Debug)]
pub struct SynthesisRates {
    pub composition: Rate,
    pub namespace: Rate,
    pub namespace_bytes: Rate,
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    compositions: HashMap<String, Bucket>,
    namespaces: HashMap<String, Bucket>,
    bytes: HashMap<String, Bucket>,
}

impl SynthesisRates {
    pub fn new(composition: Rate, namespace: Rate, namespace_bytes: Rate) -> SynthesisRates {
        SynthesisRates {
            composition,
            namespace,
            namespace_bytes,
            buckets: Mutex::new(Buckets::default()),
        }
    }

    /// Takes one synthesis of Composition `key` in `namespace` from both count buckets, if
    /// both have a token and the namespace owes no bytes; otherwise takes nothing and says
    /// how long to wait.
    ///
    /// # Errors
    /// [`Held`]: what is exceeded and for how long.
    pub fn take(&self, namespace: &str, key: &str) -> Result<(), Held> {
        let now = Instant::now();
        let mut b = self.buckets.lock();
        let full = |r: &Rate| Bucket(r.burst, now);
        let comp = b
            .compositions
            .get(key)
            .copied()
            .unwrap_or(full(&self.composition))
            .now(&self.composition, now);
        let ns = b
            .namespaces
            .get(namespace)
            .copied()
            .unwrap_or(full(&self.namespace))
            .now(&self.namespace, now);
        let bytes = b
            .bytes
            .get(namespace)
            .copied()
            .unwrap_or(full(&self.namespace_bytes))
            .now(&self.namespace_bytes, now);
        let held = [
            (
                self.composition,
                comp,
                1.0,
                "this Composition",
                "--composition-synthesis-rate",
            ),
            (
                self.namespace,
                ns,
                1.0,
                "its namespace",
                "--namespace-synthesis-rate",
            ),
        ]
        .into_iter()
        .filter(|(rate, bucket, need, ..)| rate.on() && bucket.0 < *need)
        .map(|(rate, bucket, need, who, flag)| Held {
            wait: bucket.wait(&rate, need),
            message: format!(
                "{who} synthesized more often than {} a minute after a burst of {} ({flag})",
                fmt(rate.per_second * 60.0),
                fmt(rate.burst)
            ),
        })
        .chain((self.namespace_bytes.on() && bytes.0 < 0.0).then(|| Held {
            wait: bytes.wait(&self.namespace_bytes, 0.0),
            message: format!(
                "its namespace wrote more than {} bytes of ResourceSlices a second after a \
                     burst of {} (--namespace-slice-write-rate)",
                fmt(self.namespace_bytes.per_second),
                fmt(self.namespace_bytes.burst)
            ),
        }))
        .max_by_key(|h| h.wait);
        if let Some(h) = held {
            return Err(h);
        }
        if b.compositions.len() > 100_000 || b.namespaces.len() > 100_000 {
            // Full buckets say nothing a missing one does not: forget them.
            let (c, n) = (self.composition, self.namespace);
            b.compositions.retain(|_, x| x.now(&c, now).0 < c.burst);
            b.namespaces.retain(|_, x| x.now(&n, now).0 < n.burst);
        }
        b.compositions
            .insert(key.to_string(), Bucket(comp.0 - 1.0, now));
        b.namespaces
            .insert(namespace.to_string(), Bucket(ns.0 - 1.0, now));
        Ok(())
    }

    /// `namespace` wrote `bytes` of ResourceSlices (its bucket may go into debt: the next
    /// synthesis there waits until it is paid).
    pub fn wrote(&self, namespace: &str, bytes: usize) {
        if !self.namespace_bytes.on() {
            return;
        }
        let now = Instant::now();
        {
            let mut b = self.buckets.lock();
            let r = self.namespace_bytes;
            let cur = b
                .bytes
                .get(namespace)
                .copied()
                .unwrap_or(Bucket(r.burst, now))
                .now(&r, now);
            b.bytes
                .insert(namespace.to_string(), Bucket(cur.0 - bytes as f64, now));
        }
    }

    /// How long until `namespace` owes no bytes (`None`: it owes none now, or no rate is
    /// set): the Symphony controller waits that long before it writes Compositions there.
    pub fn owed(&self, namespace: &str) -> Option<Duration> {
        if !self.namespace_bytes.on() {
            return None;
        }
        let now = Instant::now();
        let r = self.namespace_bytes;
        let cur = self
            .buckets
            .lock()
            .bytes
            .get(namespace)
            .copied()?
            .now(&r, now);
        (cur.0 < 0.0).then(|| cur.wait(&r, 0.0))
    }

    /// Forgets Composition `key` (deleted).
    pub fn forget(&self, key: &str) {
        self.buckets.lock().compositions.remove(key);
    }
}

fn fmt(n: f64) -> String {
    if n >= 10.0 || n.fract() == 0.0 {
        format!("{n:.0}")
    } else {
        format!("{n:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_their_units_and_refuse_nonsense() {
        let r = Rate::parse("6/m", 10.0).unwrap();
        assert!((r.per_second - 0.1).abs() < 1e-9);
        assert_eq!(Rate::parse("1Mi/s", 5.0).unwrap().per_second, 1048576.0);
        assert!(!Rate::parse("0", 1.0).unwrap().on());
        for bad in ["6", "6/d", "x/m", "-1/s", "1/s"] {
            let burst = if bad == "1/s" { 0.0 } else { 1.0 };
            assert!(Rate::parse(bad, burst).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_composition_waits_after_its_burst_and_others_do_not() {
        let rates = SynthesisRates::new(
            Rate::parse("1/m", 3.0).unwrap(),
            Rate::parse("60/m", 100.0).unwrap(),
            Rate::parse("0", 1.0).unwrap(),
        );
        for _ in 0..3 {
            rates.take("a", "a/x").unwrap();
        }
        let held = rates.take("a", "a/x").unwrap_err();
        assert!(held.wait > Duration::from_secs(50), "{held:?}");
        assert!(
            held.message.contains("--composition-synthesis-rate"),
            "{held:?}"
        );
        rates.take("a", "a/y").unwrap();
        rates.take("b", "b/x").unwrap();
    }

    #[test]
    fn a_namespace_is_held_by_its_syntheses_and_by_the_bytes_it_wrote() {
        let rates = SynthesisRates::new(
            Rate::parse("0", 1.0).unwrap(),
            Rate::parse("1/h", 2.0).unwrap(),
            Rate::parse("1Ki/s", 4096.0).unwrap(),
        );
        rates.take("a", "a/1").unwrap();
        rates.take("a", "a/2").unwrap();
        let held = rates.take("a", "a/3").unwrap_err();
        assert!(
            held.message.contains("--namespace-synthesis-rate"),
            "{held:?}"
        );
        rates.take("b", "b/1").unwrap();
        rates.wrote("b", 10 * 1024);
        let held = rates.take("b", "b/2").unwrap_err();
        assert!(
            held.message.contains("--namespace-slice-write-rate"),
            "{held:?}"
        );
        assert!(held.wait > Duration::from_secs(5) && held.wait <= Duration::from_secs(7));
    }
}
