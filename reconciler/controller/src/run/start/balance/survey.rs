//! What the shard Leases say, and who takes which shard: the survey of one list of the
//! Leases, the pure assignment over it, and the membership Lease of each replica.

use super::*;

/// What one list of the Leases says.
#[derive(Debug, Default)]
pub(crate) struct Survey {
    /// The identities of the live replicas (membership Lease not expired), sorted.
    pub members: BTreeSet<String>,
    /// Shards held by a live replica, and by whom.
    pub holders: BTreeMap<u32, String>,
    /// Shards whose Lease is absent, never held or released: free at once.
    pub released: BTreeSet<u32>,
    /// Shards whose Lease expired and whose holder is not live: free once it stays so.
    pub expired: BTreeSet<u32>,
    /// A held Lease of another shard count (or of unsharded enoki).
    pub foreign: Option<String>,
}

impl Survey {
    /// The survey as this replica (`me`, holding `taken`) counts it: itself a member, its
    /// own shards held, a Lease in its name it does not hold (an attempt dropped after it
    /// succeeded, whose release failed) free for it. Returns the free shards (released, or
    /// expired for a whole `duration`) and the overdue ones (free for two), tracking since
    /// when each was unheld in `unheld_since`.
    pub(super) fn as_seen_by(
        &mut self,
        me: &str,
        taken: Shards,
        unheld_since: &mut BTreeMap<u32, Instant>,
        duration: Duration,
    ) -> (BTreeSet<u32>, BTreeSet<u32>) {
        self.members.insert(me.to_string());
        let stray: Vec<u32> = self
            .holders
            .iter()
            .filter(|(i, h)| *h == me && !taken.contains(**i))
            .map(|(i, _)| *i)
            .collect();
        for i in stray {
            self.holders.remove(&i);
            self.released.insert(i);
        }
        for shard in taken.iter() {
            self.holders.insert(shard.index, me.to_string());
        }
        let now = Instant::now();
        unheld_since.retain(|i, _| self.expired.contains(i) || self.released.contains(i));
        for i in self.expired.iter().chain(&self.released) {
            unheld_since.entry(*i).or_insert(now);
        }
        let unheld_for = |i: &u32, d: Duration| {
            unheld_since
                .get(i)
                .is_some_and(|t| now.duration_since(*t) >= d)
        };
        let free: BTreeSet<u32> = self
            .released
            .iter()
            .copied()
            .chain(
                self.expired
                    .iter()
                    .copied()
                    .filter(|i| unheld_for(i, duration)),
            )
            .filter(|i| !taken.contains(*i))
            .collect();
        // Free for two Lease durations: the replica it fell to does not take it (stuck, or
        // unable to): anyone does.
        let overdue = free
            .iter()
            .copied()
            .filter(|i| unheld_for(i, duration * 2))
            .collect();
        (free, overdue)
    }
}

/// Which of the `free` shards each live replica takes, the same in every replica: each
/// free shard in order goes to the member holding the fewest (ties: the lowest identity),
/// none beyond ⌈count / members⌉. Pure.
pub(crate) fn assign(
    count: u32,
    members: &BTreeSet<String>,
    holders: &BTreeMap<u32, String>,
    free: &BTreeSet<u32>,
) -> BTreeMap<u32, String> {
    let members_n = u32::try_from(members.len()).unwrap_or(u32::MAX).max(1);
    let ceil = count.div_ceil(members_n);
    let mut load: BTreeMap<&String, u32> = members.iter().map(|m| (m, 0)).collect();
    for h in holders.values() {
        if let Some(n) = load.get_mut(h) {
            *n += 1;
        }
    }
    let mut out = BTreeMap::new();
    for shard in free {
        let Some((who, n)) = load
            .iter_mut()
            .filter(|(_, n)| **n < ceil)
            .min_by_key(|(_, n)| **n)
        else {
            break;
        };
        *n += 1;
        out.insert(*shard, (*who).clone());
    }
    out
}

/// How long ago the Lease expired (`None`: it has not). A Lease with neither renew nor
/// acquire time counts as expired.
pub(super) fn expired_for(spec: &LeaseSpec, now: SystemTime) -> Option<Duration> {
    let Some(renewed) = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| SystemTime::from(t.0))
    else {
        return Some(Duration::MAX);
    };
    let lasts = Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or_default()).unwrap_or_default(),
    );
    now.duration_since(renewed + lasts).ok()
}

/// The shard index of a Lease name of this shard count.
pub(super) fn shard_of_lease(name: &str, count: u32) -> Option<u32> {
    let (index, of) = name
        .strip_prefix("enoki-controller-shard-")?
        .split_once("-of-")?;
    (of.parse::<u32>().ok()? == count)
        .then(|| index.parse::<u32>().ok())
        .flatten()
        .filter(|i| *i < count)
}

/// One list of the Leases ([`Survey`]). Deletes membership Leases long expired (replicas
/// that did not leave cleanly).
pub(super) async fn survey(
    leases: &Api<Lease>,
    duration: Duration,
    count: u32,
) -> kube::Result<Survey> {
    let now = SystemTime::now();
    let list = leases.list(&ListParams::default()).await?;
    let mut s = Survey {
        released: (0..count).collect(),
        ..Survey::default()
    };
    let mut shard_leases = Vec::new();
    for l in list {
        let name = l.name_any();
        let spec = l.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let expired = expired_for(&spec, now);
        if let Some(of) = l.labels().get(MEMBER_LABEL) {
            // Replicas of another shard count take nothing here: not members.
            if *of != count.to_string() {
                continue;
            }
            match expired {
                None => {
                    s.members.insert(holder);
                }
                Some(ago) if ago > duration * FORGET_AFTER => {
                    let params = DeleteParams {
                        preconditions: Some(Preconditions {
                            resource_version: l.resource_version(),
                            uid: l.uid(),
                        }),
                        ..DeleteParams::default()
                    };
                    if let Err(e) = leases.delete(&name, &params).await {
                        tracing::debug!(lease = %name, error = %e, "could not delete a stale membership Lease");
                    }
                }
                Some(_) => {}
            }
        } else if let Some(index) = shard_of_lease(&name, count) {
            shard_leases.push((index, holder, expired.is_some()));
        } else if (name == "enoki-controller" || name.starts_with("enoki-controller-shard-"))
            && expired.is_none_or(|ago| ago < duration * 2)
            && !holder.is_empty()
        {
            s.foreign = Some(name);
        }
    }
    for (index, holder, expired) in shard_leases {
        if holder.is_empty() {
            continue;
        }
        s.released.remove(&index);
        // Unexpired (even when its holder's membership is not live: it was away), or
        // expired while its holder lives (it renews late): held.
        if !expired || s.members.contains(&holder) {
            s.holders.insert(index, holder);
        } else {
            s.expired.insert(index);
        }
    }
    Ok(s)
}

/// This replica's membership Lease, renewed in the background while it lives.
pub(super) struct Member {
    leases: Api<Lease>,
    name: String,
    renewing: tokio::task::JoinHandle<()>,
}

impl Member {
    /// Starts renewing the membership Lease (created by the first renewal).
    pub(super) fn join(
        leases: Api<Lease>,
        identity: &str,
        duration: Duration,
        count: u32,
    ) -> Member {
        let name = member_lease_name(identity);
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "labels": {MEMBER_LABEL: count.to_string()}},
            "spec": {
                "holderIdentity": identity,
                "leaseDurationSeconds": duration.as_secs(),
            },
        });
        let (api, lease_name) = (leases.clone(), name.clone());
        let renewing = tokio::spawn(async move {
            let params = PatchParams::apply("enoki").force();
            let mut every = tokio::time::interval(duration / 3);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let mut body = lease.clone();
                body["spec"]["renewTime"] =
                    json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                        k8s_openapi::jiff::Timestamp::now()
                    ));
                let body = Patch::Apply(body);
                let renew = api.patch(&lease_name, &params, &body);
                match tokio::time::timeout(duration / 3, renew).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(lease = %lease_name, error = %e, "could not renew the membership Lease");
                    }
                    Err(_) => {
                        tracing::debug!(lease = %lease_name, "renewing the membership Lease timed out")
                    }
                }
            }
        });
        Member {
            leases,
            name,
            renewing,
        }
    }

    /// Stops renewing and deletes the membership Lease (best effort: otherwise it expires).
    pub(super) async fn leave(self) {
        self.renewing.abort();
        // Wait for the renewal to be gone, so that it cannot create the Lease again.
        let _ = self.renewing.await;
        let params = DeleteParams::default();
        let delete = self.leases.delete(&self.name, &params);
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(5), delete).await {
            tracing::debug!(lease = %self.name, error = %e, "could not delete the membership Lease");
        }
    }
}

/// `enoki-controller-member-<identity>`, made a valid object name.
pub(super) fn member_lease_name(identity: &str) -> String {
    let mut name: String = format!("enoki-controller-member-{identity}")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .take(253)
        .collect();
    while name.ends_with(['-', '.']) {
        name.pop();
    }
    name
}
