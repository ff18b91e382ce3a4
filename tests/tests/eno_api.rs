//! Eno's own objects reconciled as they are (`enoki run --serve-eno-api`) on the real control
//! plane: Eno's CRDs (the opt-in manifest), a Synthesizer whose `spec.image` is a WebAssembly
//! module pushed to a registry by tag, a Composition with bindings and `synthesisEnv`, a
//! Symphony with variations — as Eno's docs write them — converge, with Eno's finalizer and
//! status in Eno's shape; deleting one deletes its outputs and lets Eno's leftover slices go.
//! An `enoki.dev` Composition next to them is not touched, one of the same name is never
//! written over, and an image that is no module is said and nothing else happens.
#![allow(clippy::unwrap_used)] // test code

use std::time::Duration;

use crds::eno;
use harness::{Enoki, TestEnv, echo_module, eventually, install_crds, install_synthesizer};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);

/// Eno's CRDs as `deploy/eno-api` installs them.
async fn install_eno_crds(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds::manifests::eno() {
        let name = crd.metadata.name.clone().unwrap();
        let pp = PatchParams::apply("eno-api-test").force();
        crds.patch(&name, &pp, &Patch::Apply(&crd)).await.unwrap();
        let established = await_condition(crds.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(WAIT, established)
            .await
            .unwrap()
            .unwrap();
    }
}

/// The test's namespace with Eno's CRDs, the echo module pushed as `<registry>/eno/echo:v1`
/// (by tag), and an enoki serving Eno's API for objects labelled `eno-api: <namespace>`.
struct Eno {
    env: TestEnv,
    image: String,
    _registry: harness::Proc,
    _enoki: Enoki,
}

impl Eno {
    async fn new() -> Eno {
        let env = TestEnv::new().await;
        install_crds(&env.client).await;
        install_eno_crds(&env.client).await;
        let (registry, addr) = harness::start_registry();
        let dir = harness::tempdir("eno-api");
        let file = dir.join("echo.wasm");
        std::fs::write(&file, echo_module()).unwrap();
        let image = format!("{addr}/eno/echo:v1");
        harness::push_module(&file, &image);
        let selector = format!("eno-api={}", env.namespace);
        let enoki = Enoki::start_with("", &["--label-selector", &selector, "--serve-eno-api"]);
        Eno {
            env,
            image,
            _registry: registry,
            _enoki: enoki,
        }
    }

    fn labels(&self) -> Value {
        json!({"eno-api": self.env.namespace})
    }

    /// An Eno Synthesizer `<namespace>-<suffix>` of `image` taking a ConfigMap `config`.
    async fn synthesizer(&self, suffix: &str, image: &str) -> String {
        let name = format!("{}-{suffix}", self.env.namespace);
        let s = json!({"apiVersion": "eno.azure.io/v1", "kind": "Synthesizer",
            "metadata": {"name": name},
            "spec": {"image": image, "execTimeout": "10s", "podTimeout": "2m",
                     "refs": [{"key": "config",
                               "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}]}});
        let api: Api<eno::Synthesizer> = Api::all(self.env.client.clone());
        apply(&api, &name, &s).await;
        name
    }

    /// A ConfigMap `name` for the echo module: it emits `items`; `env-out` mirrors `REGION`.
    async fn config(&self, name: &str, items: Value) {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
            "data": {"items": items.to_string(), "env-mirror": format!("{name}-env"),
                     "env-vars": "REGION"}});
        apply(&self.env.api::<ConfigMap>(), name, &cm).await;
    }

    /// An Eno Composition `name` on `synth`, `config` bound to the ConfigMap `config`.
    async fn composition(&self, name: &str, synth: &str, config: &str) {
        let c = json!({"apiVersion": "eno.azure.io/v1", "kind": "Composition",
            "metadata": {"name": name, "labels": self.labels()},
            "spec": {"synthesizer": {"name": synth},
                     "bindings": [{"key": "config", "resource": {"name": config}}],
                     "synthesisEnv": [{"name": "REGION", "value": "westus"}]}});
        apply(&self.env.api::<eno::Composition>(), name, &c).await;
    }

    async fn eno_status(&self, name: &str) -> Option<(eno::Composition, Value)> {
        let c = self
            .env
            .api::<eno::Composition>()
            .get_opt(name)
            .await
            .unwrap()?;
        let status = serde_json::to_value(&c.status).unwrap();
        Some((c, status))
    }

    /// Waits until the Eno Composition `name` is Ready in Eno's terms.
    async fn ready(&self, name: &str) -> eno::Composition {
        eventually(&format!("Eno Composition {name} Ready"), WAIT, || async {
            let (c, _) = self.eno_status(name).await?;
            let st = c.status.as_ref()?;
            let current = st.current_synthesis.as_ref()?;
            (st.simplified.as_ref()?.status == "Ready"
                && current.ready.is_some()
                && current.observed_composition_generation == c.metadata.generation)
                .then_some(c)
        })
        .await
    }

    async fn config_map(&self, name: &str) -> Option<ConfigMap> {
        self.env.api::<ConfigMap>().get_opt(name).await.unwrap()
    }
}

async fn apply<K>(api: &Api<K>, name: &str, body: &Value)
where
    K: kube::Resource + Clone + for<'de> k8s_openapi::serde::Deserialize<'de> + std::fmt::Debug,
{
    let pp = PatchParams::apply("eno-api-test").force();
    api.patch(name, &pp, &Patch::Apply(body)).await.unwrap();
}

fn items(cm: &str) -> Value {
    json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm},
            "data": {"from": "eno"}}])
}

/// An Eno Composition with bindings and `synthesisEnv` on a Synthesizer whose image is a
/// pushed module (by tag) converges: outputs applied, the environment reaches the module, Eno's
/// finalizer on it, its status in Eno's shape (no enoki field, Eno's generation observed).
/// Deleting the Composition deletes its output
/// and lets it go, with an Eno ResourceSlice Eno left behind (finalizer and all).
#[tokio::test]
async fn an_eno_composition_converges_as_it_is_and_goes_cleanly() {
    let eno = Eno::new().await;
    let synth = eno.synthesizer("echo", &eno.image).await;
    eno.config("cfg", items("web-out")).await;
    eno.composition("web", &synth, "cfg").await;
    let c = eno.ready("web").await;
    assert!(eno.config_map("web-out").await.is_some());
    let env = eno
        .config_map("cfg-env")
        .await
        .expect("the environment ConfigMap");
    assert_eq!(
        env.data.unwrap()["REGION"],
        "westus",
        "synthesisEnv reaches the module"
    );
    assert!(c.finalizers().contains(&eno::CLEANUP_FINALIZER.to_string()));
    let (_, status) = eno.eno_status("web").await.unwrap();
    for enoki_only in ["conditions", "observedGeneration"] {
        assert!(status.get(enoki_only).is_none(), "{enoki_only} in {status}");
    }
    assert!(status["currentSynthesis"].get("moduleDigest").is_none());
    nothing_written_at_rest(&eno, "web").await;
    // The mirror: an enoki.dev Composition of the same name, labelled and owned.
    let mirror = eno.env.api::<crds::Composition>().get("web").await.unwrap();
    assert_eq!(mirror.labels()["enoki.dev/eno-mirror"], "true");
    assert_eq!(mirror.owner_references()[0].uid, c.uid().unwrap());
    // The Synthesizer's tag was resolved to the digest it serves.
    let synth_mirror = Api::<crds::Synthesizer>::all(eno.env.client.clone())
        .get(&synth)
        .await
        .unwrap();
    let pinned = synth_mirror.spec.module.oci.unwrap();
    assert!(
        pinned.starts_with(&format!("{}@sha256:", eno.image)),
        "{pinned}"
    );
    module_edit_undone(&eno, &synth, &pinned).await;

    // What Eno left: a slice of the Composition with Eno's finalizer.
    let slices = eno.env.api::<eno::ResourceSlice>();
    let mut slice: eno::ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "web-eno-slice", "finalizers": [eno::CLEANUP_FINALIZER]},
        "spec": {"resources": [{"manifest": "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\"}"}]}}))
    .unwrap();
    slice.metadata.owner_references =
        Some(vec![kube::Resource::controller_owner_ref(&c, &()).unwrap()]);
    slices.create(&PostParams::default(), &slice).await.unwrap();
    eno.env
        .api::<eno::Composition>()
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the Eno Composition, its output and Eno's slice gone",
        WAIT,
        || async {
            let gone = eno.eno_status("web").await.is_none()
                && eno.config_map("web-out").await.is_none()
                && slices.get_opt("web-eno-slice").await.unwrap().is_none();
            gone.then_some(())
        },
    )
    .await;
}

/// An Eno Symphony with two variations (one Synthesizer each) converges: each variation's
/// output applied, the Symphony Ready in Eno's terms (its generation observed).
#[tokio::test]
async fn an_eno_symphony_with_variations_converges() {
    let eno = Eno::new().await;
    let synth = eno.synthesizer("echo", &eno.image).await;
    let other = eno.synthesizer("echo-two", &eno.image).await;
    eno.config("cfg-a", items("sym-a")).await;
    eno.config("cfg-b", items("sym-b")).await;
    let variation = |synth: &str, cfg: &str| {
        json!({"synthesizer": {"name": synth}, "labels": eno.labels(),
               "bindings": [{"key": "config", "resource": {"name": cfg}}]})
    };
    let sym = json!({"apiVersion": "eno.azure.io/v1", "kind": "Symphony",
        "metadata": {"name": "stack", "labels": eno.labels()},
        "spec": {"variations": [variation(&synth, "cfg-a"), variation(&other, "cfg-b")]}});
    apply(&eno.env.api::<eno::Symphony>(), "stack", &sym).await;
    eventually("the Symphony Ready in Eno's terms", WAIT, || async {
        let s = eno.env.api::<eno::Symphony>().get("stack").await.unwrap();
        let st = s.status?;
        (st.ready.is_some() && st.observed_generation == s.metadata.generation).then_some(())
    })
    .await;
    assert!(eno.config_map("sym-a").await.is_some() && eno.config_map("sym-b").await.is_some());
}

/// An `enoki.dev` Composition next to Eno's converges untouched; one with the name of an Eno
/// Composition is never written over: the Eno one says `Conflict`, the enoki one runs on.
#[tokio::test]
async fn an_enoki_composition_beside_enos_is_left_alone() {
    let eno = Eno::new().await;
    let synth = eno.synthesizer("echo", &eno.image).await;
    let native = install_synthesizer(&eno.env, "native", &echo_module()).await;
    eno.config("cfg-native", items("native-out")).await;
    eno.config("cfg-eno", items("eno-out")).await;
    let enoki_comp = |name: &str| {
        json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
            "metadata": {"name": name, "labels": eno.labels()},
            "spec": {"synthesizer": {"name": native},
                     "bindings": [{"key": "config", "resource": {"name": "cfg-native"}}]}})
    };
    let comps = eno.env.api::<crds::Composition>();
    // A tenant's Eno Composition without a spec stops nothing (it says what it lacks).
    let bare = json!({"apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": "bare", "labels": eno.labels()}});
    apply(&eno.env.api::<eno::Composition>(), "bare", &bare).await;
    apply(&comps, "taken", &enoki_comp("taken")).await;
    eno.composition("taken", &synth, "cfg-eno").await;
    eno.composition("beside", &synth, "cfg-eno").await;
    eno.ready("beside").await;
    let (_, status) = eno.eno_status("bare").await.unwrap();
    assert_eq!(
        status["simplified"]["status"], "MissingSynthesizer",
        "{status}"
    );
    let mirror = eno
        .env
        .api::<crds::Composition>()
        .get_opt("bare")
        .await
        .unwrap();
    assert!(
        mirror.is_none(),
        "no mirror of a Composition without a Synthesizer"
    );
    // An edit of the mirror itself is undone: the Eno object says what it is.
    let edit = json!({"spec": {"synthesisEnv": [{"name": "REGION", "value": "edited"}],
                               "suspend": true}});
    comps
        .patch("beside", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    eventually("the mirror's edit undone", WAIT, || async {
        let m = comps.get("beside").await.unwrap();
        (!m.spec.suspend && m.spec.synthesis_env[0].value == "westus").then_some(())
    })
    .await;
    let (_, status) = eventually("the Eno Composition reports the conflict", WAIT, || async {
        let (c, status) = eno.eno_status("taken").await?;
        (c.status?.simplified?.status == "Conflict").then_some(((), status))
    })
    .await;
    let error = status["simplified"]["error"].as_str().unwrap();
    assert!(error.contains("is not this object's mirror"), "{error}");
    eventually("the enoki Composition Ready", WAIT, || async {
        let c = comps.get("taken").await.unwrap();
        let ready = c
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    let c = comps.get("taken").await.unwrap();
    assert_eq!(c.spec.synthesizer.name, native, "never written over");
    assert!(!c.labels().contains_key("enoki.dev/eno-mirror"));
    assert!(eno.config_map("native-out").await.is_some());
}

/// Eno's lists allow a key twice, enoki's do not: such a Composition says `InvalidSpec`.
/// `kubectl delete --cascade=orphan` of an Eno Composition keeps its mirror running and what
/// it applied.
#[tokio::test]
async fn a_key_twice_is_said_and_cascade_orphan_keeps_the_mirror() {
    let eno = Eno::new().await;
    let synth = eno.synthesizer("echo", &eno.image).await;
    eno.config("cfg-eno", items("eno-out")).await;
    eno.config("cfg-native", items("native-out")).await;
    let comps = eno.env.api::<crds::Composition>();
    eno.composition("beside", &synth, "cfg-eno").await;
    eno.ready("beside").await;
    // Eno's lists allow a key twice; enoki's do not: the Composition says so.
    let twice = json!({"apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": "twice", "labels": eno.labels()},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "cfg-eno"}},
                              {"key": "config", "resource": {"name": "cfg-native"}}]}});
    apply(&eno.env.api::<eno::Composition>(), "twice", &twice).await;
    let (_, status) = eventually("a key bound twice is said", WAIT, || async {
        let (c, status) = eno.eno_status("twice").await?;
        (c.status?.simplified?.status == "InvalidSpec").then_some(((), status))
    })
    .await;
    assert!(
        status["simplified"]["error"]
            .as_str()
            .unwrap()
            .contains("twice"),
        "{status}"
    );
    // `--cascade=orphan`: the Eno object goes, its mirror (and what it applied) stays.
    let orphan = DeleteParams {
        propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    eno.env
        .api::<eno::Composition>()
        .delete("beside", &orphan)
        .await
        .unwrap();
    eventually("the Eno Composition gone", WAIT, || async {
        eno.eno_status("beside").await.is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = comps.get("beside").await.unwrap();
    assert!(kept.owner_references().is_empty() && kept.metadata.deletion_timestamp.is_none());
    assert!(eno.config_map("eno-out").await.is_some());
}

/// An edit of a Synthesizer mirror's module (or another field) is undone: it runs what the
/// Eno Synthesizer names.
async fn module_edit_undone(eno: &Eno, synth: &str, pinned: &str) {
    let synths = Api::<crds::Synthesizer>::all(eno.env.client.clone());
    let elsewhere = format!("{}@sha256:{}", eno.image, "0".repeat(64));
    let edit = json!({"spec": {"module": {"oci": elsewhere},
                               "env": [{"name": "X", "value": "1"}]}});
    let pp = PatchParams::default();
    synths
        .patch(synth, &pp, &Patch::Merge(&edit))
        .await
        .unwrap();
    eventually("the Synthesizer mirror's edit undone", WAIT, || async {
        let m = synths.get(synth).await.unwrap();
        (m.spec.module.oci.as_deref() == Some(pinned) && m.spec.env.is_empty()).then_some(())
    })
    .await;
}

/// Nothing is written at rest: no status ping-pong between the mirror and Eno's object.
async fn nothing_written_at_rest(eno: &Eno, name: &str) {
    let mirrors = eno.env.api::<crds::Composition>();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (before, _) = eno.eno_status(name).await.unwrap();
    let mirror_before = mirrors.get(name).await.unwrap();
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (after, _) = eno.eno_status(name).await.unwrap();
    let mirror_after = mirrors.get(name).await.unwrap();
    assert_eq!(
        before.resource_version(),
        after.resource_version(),
        "written at rest"
    );
    assert_eq!(
        mirror_before.resource_version(),
        mirror_after.resource_version()
    );
}

/// A Synthesizer whose image is no WebAssembly module (a Helm chart's artifact, a tag the
/// registry does not have): an Event naming the image, its Composition's status says so, and
/// nothing is mirrored or applied.
#[tokio::test]
async fn an_image_that_is_no_module_is_said_and_nothing_happens() {
    let eno = Eno::new().await;
    let registry = eno.image.split('/').next().unwrap().to_string();
    let (chart, digest) = push_chart(&registry);
    let pinned = format!("{registry}/charts/greeter@{digest}");
    let missing = eno.image.replace(":v1", ":not-pushed");
    eno.config("cfg", items("never")).await;
    for (suffix, image, says) in [
        ("chart", chart.as_str(), "is not a WebAssembly module"),
        ("pinned", pinned.as_str(), "is not a WebAssembly module"),
        ("missing", missing.as_str(), "not-pushed"),
    ] {
        let synth = eno.synthesizer(suffix, image).await;
        let comp = format!("nothing-{suffix}");
        eno.composition(&comp, &synth, "cfg").await;
        let (_, status) = eventually(
            &format!("{comp} says its module is missing"),
            WAIT,
            || async {
                let (c, status) = eno.eno_status(&comp).await?;
                (c.status?.simplified?.status == "MissingSynthesizer").then_some(((), status))
            },
        )
        .await;
        let error = status["simplified"]["error"].as_str().unwrap();
        assert!(error.contains(image) && error.contains(says), "{error}");
        let note = eventually(
            "a ModuleUnavailable Event on the Synthesizer",
            WAIT,
            || async { module_unavailable(&eno.env.client, &synth).await },
        )
        .await;
        assert!(note.contains(image), "{note}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mirror = eno
            .env
            .api::<crds::Composition>()
            .get_opt(&comp)
            .await
            .unwrap();
        assert!(mirror.is_none(), "no mirror Composition");
        let synths = Api::<crds::Synthesizer>::all(eno.env.client.clone());
        assert!(
            synths.get_opt(&synth).await.unwrap().is_none(),
            "no mirror Synthesizer"
        );
    }
    assert!(eno.config_map("never").await.is_none());
    left_in_place_when_never_mirrored(&eno).await;
}

/// An Eno Composition deleted before enoki ever reconciled it: what Eno applied (its Eno
/// slice says) is left in place, and a Warning names it.
async fn left_in_place_when_never_mirrored(eno: &Eno) {
    let comps = eno.env.api::<eno::Composition>();
    let c = comps.get("nothing-missing").await.unwrap();
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "eno-applied", "namespace": eno.env.namespace}});
    apply(&eno.env.api::<ConfigMap>(), "eno-applied", &applied).await;
    let mut slice: eno::ResourceSlice = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "nothing-slice", "finalizers": [eno::CLEANUP_FINALIZER]},
        "spec": {"resources": [{"manifest": applied.to_string()}]}}))
    .unwrap();
    slice.metadata.owner_references =
        Some(vec![kube::Resource::controller_owner_ref(&c, &()).unwrap()]);
    let slices = eno.env.api::<eno::ResourceSlice>();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    comps
        .delete("nothing-missing", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Composition and its Eno slice gone", WAIT, || async {
        let gone = eno.eno_status("nothing-missing").await.is_none()
            && slices.get_opt("nothing-slice").await.unwrap().is_none();
        gone.then_some(())
    })
    .await;
    assert!(
        eno.config_map("eno-applied").await.is_some(),
        "left in place"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = eno.env.api();
    let lp = kube::api::ListParams::default().fields("regarding.name=nothing-missing");
    let notes: Vec<String> = events
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("LeftInPlace"))
        .filter_map(|e| e.note)
        .collect();
    let ns = &eno.env.namespace;
    assert!(
        notes
            .iter()
            .any(|n| n.contains(&format!("ConfigMap {ns}/eno-applied"))),
        "{notes:?}"
    );
}

/// The note of a `ModuleUnavailable` Event on the Synthesizer `name`.
async fn module_unavailable(client: &kube::Client, name: &str) -> Option<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let lp = kube::api::ListParams::default().fields(&format!("regarding.name={name}"));
    events
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("ModuleUnavailable"))
        .and_then(|e| e.note)
}

/// `samples/12-helm/chart` pushed with `helm push` (an OCI artifact with no wasm layer): its
/// reference by tag, and its digest.
fn push_chart(registry: &str) -> (String, String) {
    let helm = std::env::var("HELM").expect("HELM: the helm binary (make test sets it)");
    let dir = harness::tempdir("eno-chart");
    let chart = harness::workspace_root().join("samples/12-helm/chart");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&helm)
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "helm {args:?}: {text}");
        text + &String::from_utf8_lossy(&out.stdout)
    };
    run(&[
        "package",
        chart.to_str().unwrap(),
        "-d",
        dir.to_str().unwrap(),
    ]);
    let tgz = dir.join("greeter-0.1.0.tgz");
    let to = format!("oci://{registry}/charts");
    let pushed = run(&["push", tgz.to_str().unwrap(), &to, "--plain-http"]);
    let digest = pushed
        .split_whitespace()
        .find(|w| w.starts_with("sha256:"))
        .unwrap_or_else(|| panic!("helm push printed no digest: {pushed}"))
        .to_string();
    (format!("{registry}/charts/greeter:0.1.0"), digest)
}

/// An Eno Symphony moved over from Eno: the Composition Eno's Symphony made (owned by it,
/// Eno's finalizer on it) is not mirrored — the Symphony's mirror makes its own, which adopts
/// what Eno applied; deleting the Symphony lets Eno's Composition go and, as in Eno, leaves
/// the resources.
#[tokio::test]
async fn a_symphony_eno_ran_moves_over() {
    let eno = Eno::new().await;
    let synth = eno.synthesizer("echo", &eno.image).await;
    eno.config("cfg", items("sym-out")).await;
    // What Eno left: the Symphony, the Composition it made, and that Composition's output.
    let variation = json!({"synthesizer": {"name": synth}, "labels": eno.labels(),
                           "bindings": [{"key": "config", "resource": {"name": "cfg"}}]});
    let sym = json!({"apiVersion": "eno.azure.io/v1", "kind": "Symphony",
        "metadata": {"name": "stack", "labels": eno.labels()},
        "spec": {"variations": [variation]}});
    let syms = eno.env.api::<eno::Symphony>();
    let left = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sym-out"}, "data": {"from": "eno"}});
    apply(&eno.env.api::<ConfigMap>(), "sym-out", &left).await;
    apply(&syms, "stack", &sym).await;
    let owner = syms.get("stack").await.unwrap();
    let made = json!({"apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": "stack-x7k2p", "labels": eno.labels(),
                     "finalizers": [eno::CLEANUP_FINALIZER],
                     "ownerReferences": [{"apiVersion": "eno.azure.io/v1", "kind": "Symphony",
                        "name": "stack", "uid": owner.uid().unwrap(), "controller": true}]},
        "spec": {"synthesizer": {"name": synth},
                 "bindings": [{"key": "config", "resource": {"name": "cfg"}}]}});
    apply(&eno.env.api::<eno::Composition>(), "stack-x7k2p", &made).await;
    eventually("the Symphony Ready in Eno's terms", WAIT, || async {
        let s = syms.get("stack").await.unwrap();
        let st = s.status?;
        (st.ready.is_some() && st.observed_generation == s.metadata.generation).then_some(())
    })
    .await;
    let comps = eno.env.api::<crds::Composition>();
    assert!(
        comps.get_opt("stack-x7k2p").await.unwrap().is_none(),
        "not mirrored"
    );
    let (_, status) = eventually("Eno's Composition says who reconciles it", WAIT, || async {
        let (c, status) = eno.eno_status("stack-x7k2p").await?;
        (c.status?.simplified?.status == "Superseded").then_some(((), status))
    })
    .await;
    let said = status["simplified"]["error"].as_str().unwrap();
    assert!(said.contains(&format!("stack-{synth}")), "{said}");
    let out = eno
        .config_map("sym-out")
        .await
        .expect("the variation's output");
    let variation = comps.get(&format!("stack-{synth}")).await.unwrap();
    let by = out.labels().get("enoki.dev/managed-by");
    assert_eq!(
        by,
        variation.uid().as_ref(),
        "adopted by the variation's Composition"
    );
    syms.delete("stack", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "Eno's Composition let go with its Symphony",
        WAIT,
        || async {
            let gone = syms.get_opt("stack").await.unwrap().is_none()
                && eno.eno_status("stack-x7k2p").await.is_none();
            gone.then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        eno.config_map("sym-out").await.is_some(),
        "a Symphony's resources are orphaned"
    );
}
