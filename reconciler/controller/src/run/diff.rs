//! `enoki diff`: what applying a Composition's next synthesis would change, without writing
//! anything. The synthesis runs exactly as the controller runs it (its inputs read from the
//! cluster, or local files as `enoki render` takes them); every resource is then sent as a
//! server-side apply **dry run** with enoki's field manager, and the object the API server
//! would store is compared with the live one. Resources of the current synthesis that the new
//! one no longer emits are listed as prunes. Like `kubectl diff`, the caller exits 1 when
//! anything differs. Reads and dry runs act as the Composition's ServiceAccount when the
//! tenancy options say it has one (as the controller acts), references out of its namespace
//! are refused under `--no-cross-namespace-refs`, and Secret values are masked as `kubectl
//! diff` masks them.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context as _;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::cluster::Cluster;
use super::composition::{observe, synthesize};
use super::context::{Clusters, Reads, Tenancy};
use super::{Options, inputs};
use crate::synthesis::{self, Module, SynthesisInput};
use crds::names::FIELD_MANAGER;
use crds::{Composition, ResourceSlice};
use plan::{CompositionInfo, Desired, ResourceKey};

mod text;
use text::{label_of, mask_secrets, normalized, unified};
mod created;
use created::{Parent, created, made_by_the_same_synthesis};

/// What to diff.
#[allow(clippy::large_enum_variant)] // built once per `enoki diff` command
pub enum Target {
    /// A Composition in the cluster: its Synthesizer, module and bound inputs, as the
    /// controller reads them.
    Cluster {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A module and input from local files (`enoki render`'s arguments); the Composition of
    /// the same name and namespace, when it exists, gives the UID and the current synthesis.
    Local {
        /// The engine the module was loaded into.
        host: wasm_host::Host,
        /// The module.
        module: Module,
        /// The stdin.
        input: Box<SynthesisInput>,
        /// Run limits.
        limits: wasm_host::RunLimits,
    },
}

/// The result: the text to print and whether anything would change.
pub struct Report {
    /// Unified diffs per object, then the prunes and a summary line.
    pub text: String,
    /// Whether applying would change anything (exit code 1).
    pub differs: bool,
    /// The same as one JSON object (`-o json`): the counts, and per resource its change
    /// (`changed`, `unchanged`, `pruned`, `skipped`) with its diff or note.
    pub json: serde_json::Value,
}

/// What a diff uses: the clusters (acting as each Composition's account, as the controller
/// does), the wasm engine and the options. No cache, watch, metric or memory: every read is a
/// GET and nothing is kept.
struct Handles {
    clusters: Clusters,
    host: Arc<wasm_host::Host>,
    opts: Options,
    /// None loaded: the CLI never opens sealed Secrets (it runs as the user, without the
    /// slice key).
    keys: super::sealing::SliceKeys,
}

impl Handles {
    fn new(
        (management, target): (Arc<Cluster>, Arc<Cluster>),
        opts: Options,
    ) -> anyhow::Result<Self> {
        let host = Arc::new(opts.sandbox.host(
            opts.modules.module_cache_dir.as_deref(),
            opts.synthesis.max_concurrent_syntheses,
        )?);
        Ok(Handles {
            clusters: Clusters::new(management, target, Tenancy::of(&opts)),
            host,
            opts,
            keys: super::sealing::SliceKeys::default(),
        })
    }

    fn reads(&self) -> Reads<'_> {
        Reads::uncached(&self.clusters, &self.opts.tenancy, &self.keys)
    }
}

/// Runs `enoki diff`.
///
/// # Errors
/// The Composition, its Synthesizer, module or inputs cannot be read, the synthesis fails, or
/// a dry run is refused (the message names the object).
pub async fn diff(opts: Options, target: Target, show_secrets: bool) -> anyhow::Result<Report> {
    let clusters = super::start::clusters(&opts).await?;
    let ctx = Handles::new(clusters, opts)?;
    let (comp, items) = match target {
        Target::Cluster { namespace, name } => {
            let comp = Api::<Composition>::namespaced(ctx.clusters.client().clone(), &namespace)
                .get(&name)
                .await
                .with_context(|| format!("Composition {namespace}/{name}"))?;
            let items = synthesize_from_cluster(&ctx, &comp).await?;
            (Some(comp), items)
        }
        Target::Local {
            host,
            module,
            input,
            limits,
        } => {
            let (ns, name) = (
                input.composition.namespace.clone(),
                input.composition.name.clone(),
            );
            let comp = Api::<Composition>::namespaced(ctx.clusters.client().clone(), &ns)
                .get_opt(&name)
                .await
                .with_context(|| format!("Composition {ns}/{name}"))?;
            let who = format!("Composition {ns}/{name}");
            let items = run_blocking(Arc::new(host), module, *input, limits, false, &who).await?;
            let info = CompositionInfo {
                name,
                namespace: ns,
                ..CompositionInfo::default()
            };
            (comp, Items { items, info })
        }
    };
    compare(&ctx, comp.as_ref(), items, show_secrets).await
}

/// The synthesized items with the Composition they are for.
struct Items {
    items: Vec<Value>,
    info: CompositionInfo,
}

fn info_of(comp: &Composition) -> CompositionInfo {
    CompositionInfo {
        name: comp.name_any(),
        namespace: comp.namespace().unwrap_or_default(),
        uid: comp.uid().unwrap_or_default(),
        labels: comp.labels().clone(),
        annotations: comp.annotations().clone(),
        ..CompositionInfo::default()
    }
}

async fn synthesize_from_cluster(ctx: &Handles, comp: &Composition) -> anyhow::Result<Items> {
    let who = format!(
        "Composition {}/{}",
        comp.namespace().unwrap_or_default(),
        comp.name_any()
    );
    let synth = observe::synthesizer(ctx.reads(), comp)
        .await?
        .with_context(|| {
            format!(
                "{who}: Synthesizer {} does not exist",
                comp.spec.synthesizer.name
            )
        })?;
    if ctx.opts.tenancy.no_cross_namespace_refs {
        let violations = super::tenancy::cross_namespace_refs(comp, &synth, None);
        if !violations.is_empty() {
            anyhow::bail!(
                "{who}: cross-namespace references are not allowed (--no-cross-namespace-refs): {}",
                violations.join("; ")
            );
        }
    }
    if let Err(msg) = ctx.clusters.remote_user_of(comp) {
        anyhow::bail!("{who}: {msg}");
    }
    let module = super::synthesizer::fetch_module(&ctx.clusters, &ctx.host, &ctx.opts, &synth)
        .await
        .map_err(|e| anyhow::anyhow!("Synthesizer {}: {e}", synth.name_any()))?;
    let gathered = match observe::gather(ctx.reads(), comp, &synth).await? {
        reconciler_core::model::Outcome::Ready(g) => g,
        reconciler_core::model::Outcome::Waits(m) => anyhow::bail!("{who}: {m}"),
    };
    let st = comp.status.clone().unwrap_or_default();
    let observed = inputs::observed_outputs(ctx.reads(), comp, &st).await?.0;
    let input = synthesize::input_for(
        &ctx.opts.synthesis,
        comp,
        &synth,
        &gathered,
        observed,
        String::new(),
    );
    let limits = ctx
        .opts
        .sandbox
        .limits_of(synth.spec.limits.as_ref())
        .map_err(|e| anyhow::anyhow!("Synthesizer {}: {e}", synth.name_any()))?;
    let secure = synth.spec.entropy == Some(crds::Entropy::Secure);
    let items = run_blocking(ctx.host.clone(), module, input, limits, secure, &who).await?;
    Ok(Items {
        items,
        info: info_of(comp),
    })
}

/// One synthesis on a blocking thread (the wasm host drives its own runtime); the items.
async fn run_blocking(
    host: Arc<wasm_host::Host>,
    module: Module,
    input: SynthesisInput,
    limits: wasm_host::RunLimits,
    secure: bool,
    who: &str,
) -> anyhow::Result<Vec<Value>> {
    let out = tokio::task::spawn_blocking(move || {
        synthesis::synthesize(
            &host,
            &module,
            &input,
            limits,
            secure,
            &synthesis::static_is_namespaced,
        )
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{who}: synthesis failed ({}): {e}", e.reason()))?;
    Ok(out.items)
}

async fn api_for(
    ctx: &Handles,
    comp: Option<&Composition>,
    api_version: &str,
    key: &ResourceKey,
) -> anyhow::Result<Api<DynamicObject>> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, &key.kind);
    let (ar, namespaced) = ctx
        .clusters
        .resolve_target(&gvk)
        .await
        .with_context(|| format!("kind {api_version} {} is not served", key.kind))?;
    // As the controller: the Composition's account when it has one.
    let client = match comp {
        Some(c) => ctx
            .clusters
            .target_for(c)
            .with_context(|| format!("acting as {:?}", ctx.clusters.service_account(c)))?,
        None => ctx.clusters.target().client.clone(),
    };
    Ok(if namespaced {
        Api::namespaced_with(client, &key.namespace, &ar)
    } else {
        Api::all_with(client, &ar)
    })
}

async fn compare(
    ctx: &Handles,
    comp: Option<&Composition>,
    items: Items,
    show_secrets: bool,
) -> anyhow::Result<Report> {
    let Items { items, mut info } = items;
    if let Some(c) = comp {
        info = info_of(c);
    }
    let desired: Vec<Desired> = items
        .into_iter()
        .map(|manifest| Desired {
            manifest,
            tombstone: false,
        })
        .collect();
    let prepared = plan::prepare(&desired, &info).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut text = String::new();
    let mut resources = Vec::new();
    let (mut changed, mut unchanged, mut skipped) = (0, 0, 0);
    let mut emitted = BTreeSet::new();
    let n = prepared.resources.len();
    if n > 20 {
        crate::progress(&format!("dry-running {n} objects…"));
    }
    for r in &prepared.resources {
        emitted.insert(r.key.clone());
        let resource = label_of(
            r.manifest["apiVersion"].as_str().unwrap_or_default(),
            &r.key,
        );
        // Its CRD or Namespace comes with it and is not there yet: shown as created.
        let diffed = if waits_for_its_parent(ctx, comp, &prepared.resources, r).await {
            let (snapshot, _) = plan::plan::desired_snapshot(r, None, &info);
            Diffed::Changed(created(&resource, &snapshot, show_secrets))
        } else {
            diff_one(ctx, comp, r, &info, show_secrets).await?
        };
        match diffed {
            Diffed::Skipped(note) => {
                resources.push(json!({"resource": resource, "change": "skipped",
                    "note": note.trim_start_matches("# ").trim_end()}));
                text.push_str(&note);
                skipped += 1;
            }
            Diffed::Unchanged => {
                resources.push(json!({"resource": resource, "change": "unchanged"}));
                unchanged += 1;
            }
            Diffed::Changed(diff) => {
                resources.push(json!({"resource": resource, "change": "changed", "diff": diff}));
                text.push_str(&diff);
                changed += 1;
            }
        }
    }
    let prunes = prunes(ctx, comp, &emitted).await?;
    for (label, live) in &prunes {
        let mut live = live.clone();
        if !show_secrets && live["kind"] == "Secret" {
            mask_secrets(Some(&mut live), None);
        }
        let diff = unified(label, &normalized(&live), "");
        resources.push(json!({"resource": label.trim(), "change": "pruned", "diff": diff}));
        text.push_str(&diff);
    }
    let differs = changed > 0 || !prunes.is_empty();
    let json = json!({"differs": differs, "changed": changed, "unchanged": unchanged,
        "pruned": prunes.len(), "skipped": skipped, "resources": resources});
    let pruned = prunes.len();
    text.push_str(&format!(
        "# {changed} changed, {unchanged} unchanged, {pruned} pruned, {skipped} skipped\n"
    ));
    Ok(Report {
        text,
        differs,
        json,
    })
}

/// What the dry run of one resource shows.
enum Diffed {
    /// Not diffed: a note says why.
    Skipped(String),
    Unchanged,
    /// The unified diff.
    Changed(String),
}

/// Dry-runs one resource (a server-side apply as enoki's field manager) against its live
/// object.
async fn diff_one(
    ctx: &Handles,
    comp: Option<&Composition>,
    r: &plan::plan::PreparedResource,
    info: &plan::CompositionInfo,
    show_secrets: bool,
) -> anyhow::Result<Diffed> {
    let api_version = r.manifest["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let label = label_of(&api_version, &r.key);
    if r.patch.is_some() {
        return Ok(Diffed::Skipped(format!(
            "# {label}: a Patch pseudo-resource, not diffed\n"
        )));
    }
    let api = api_for(ctx, comp, &api_version, &r.key).await?;
    let live = api
        .get_opt(&r.key.name)
        .await
        .with_context(|| format!("reading {label}"))?
        .map(|o| serde_json::to_value(o).unwrap_or_default());
    let info = &text::with_live_shard(info, live.as_ref());
    let (snapshot, settings) = plan::plan::desired_snapshot(r, live.as_ref(), info);
    if settings.disable_reconciliation || (settings.disable_updates && live.is_some()) {
        return Ok(Diffed::Skipped(format!(
            "# {label}: not updated (its annotations disable updates)\n"
        )));
    }
    let pp = PatchParams::apply(FIELD_MANAGER).force().dry_run();
    let would = api
        .patch(&r.key.name, &pp, &Patch::Apply(&snapshot))
        .await
        .with_context(|| format!("server-side dry run of {label}"))?;
    let mut would = serde_json::to_value(would).unwrap_or_default();
    let mut live = live;
    if !show_secrets && r.key.kind == "Secret" {
        mask_secrets(live.as_mut(), Some(&mut would));
    }
    let before = live.as_ref().map(normalized).unwrap_or_default();
    let after = normalized(&would);
    Ok(if before == after {
        Diffed::Unchanged
    } else {
        Diffed::Changed(unified(&label, &before, &after))
    })
}

/// Whether `r`'s CRD or Namespace is among `all` and not in the cluster yet.
async fn waits_for_its_parent(
    ctx: &Handles,
    comp: Option<&Composition>,
    all: &[plan::plan::PreparedResource],
    r: &plan::plan::PreparedResource,
) -> bool {
    match made_by_the_same_synthesis(all, r) {
        Parent::None => false,
        Parent::Crd => {
            let api_version = r.manifest["apiVersion"].as_str().unwrap_or_default();
            api_for(ctx, comp, api_version, &r.key).await.is_err()
        }
        Parent::Namespace => {
            let ns: Api<k8s_openapi::api::core::v1::Namespace> =
                Api::all(ctx.clusters.target().client.clone());
            matches!(ns.get_opt(&r.key.namespace).await, Ok(None))
        }
    }
}

/// Live objects of the Composition's current synthesis that the new one does not emit.
async fn prunes(
    ctx: &Handles,
    comp: Option<&Composition>,
    emitted: &BTreeSet<ResourceKey>,
) -> anyhow::Result<Vec<(String, Value)>> {
    let Some(comp) = comp else {
        return Ok(Vec::new());
    };
    let ns = comp.namespace().unwrap_or_default();
    let names: Vec<String> = comp
        .status
        .as_ref()
        .and_then(|s| s.current_synthesis.as_ref())
        .map(|s| s.resource_slices.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for name in names {
        let Some(slice) = Api::<ResourceSlice>::namespaced(ctx.clusters.client().clone(), &ns)
            .get_opt(&name)
            .await
            .with_context(|| format!("ResourceSlice {ns}/{name}"))?
        else {
            continue;
        };
        for m in slice.spec.resources.iter().filter(|m| !m.deleted) {
            let Ok(manifest) = serde_json::from_str::<Value>(&m.manifest) else {
                continue;
            };
            let Ok(key) = ResourceKey::of(&manifest) else {
                continue;
            };
            if emitted.contains(&key) {
                continue;
            }
            // No prune of a Patch or of what its annotations keep (as the controller).
            if plan::plan::patch_target(&manifest).ok().flatten().is_some() {
                continue;
            }
            let own = plan::plan::annotations_of(&manifest);
            let settings = plan::settings::parse_as(&key, &key.kind, &own, comp.annotations());
            if settings.is_ok_and(|s| s.disable_reconciliation || s.prune_disabled) {
                continue;
            }
            let api_version = manifest["apiVersion"].as_str().unwrap_or_default();
            let api = api_for(ctx, Some(comp), api_version, &key).await?;
            let label = label_of(api_version, &key);
            let live = api
                .get_opt(&key.name)
                .await
                .with_context(|| format!("reading {label}"))?
                .filter(|live| live.metadata.deletion_timestamp.is_none())
                .map(|live| serde_json::to_value(live).unwrap_or_default());
            // Another Composition's object (its managed-by label) is not this one's to prune.
            let uid = comp.uid().unwrap_or_default();
            if let Some(live) = live.filter(|l| plan::plan::foreign_owner(Some(l), &uid).is_none())
            {
                out.push((label, live));
            }
        }
    }
    Ok(out)
}
