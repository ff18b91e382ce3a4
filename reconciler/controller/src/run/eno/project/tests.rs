use super::*;

fn eno_comp(yaml: &str) -> eno::Composition {
    serde_saphyr::from_str(yaml).unwrap()
}

/// Eno's example Composition (bindings, synthesisEnv, dependsOn) is its mirror's spec field
/// for field; a Synthesizer picked by labelSelector has no mirror.
#[test]
fn an_eno_composition_spec_is_its_mirrors() {
    let c = eno_comp(
        "apiVersion: eno.azure.io/v1\nkind: Composition\nmetadata: {name: web, namespace: shop, generation: 3}\n\
         spec:\n  synthesizer: {name: web-synth}\n  bindings:\n  - key: config\n    resource: {name: web-cfg, namespace: shop}\n\
         \x20 - key: global\n    resource: {name: cluster-thing}\n  synthesisEnv:\n  - {name: REGION, value: westus}\n\
         \x20 dependsOn:\n  - {name: db}\n",
    );
    let spec = composition_spec(&c).unwrap();
    assert_eq!(spec.synthesizer.name, "web-synth");
    assert_eq!(spec.bindings.len(), 2);
    assert_eq!(spec.bindings[0].resource.namespace.as_deref(), Some("shop"));
    assert_eq!(spec.bindings[1].resource.namespace, None);
    assert_eq!(spec.synthesis_env[0].value, "westus");
    assert_eq!(spec.depends_on[0].name, "db");
    assert_eq!(spec.depends_on[0].namespace, None);
    let by_label = eno_comp(
        "apiVersion: eno.azure.io/v1\nkind: Composition\nmetadata: {name: web, namespace: shop}\n\
         spec:\n  synthesizer: {labelSelector: {matchLabels: {app: web}}}\n",
    );
    let (word, _) = composition_spec(&by_label).unwrap_err();
    assert_eq!(word, "MissingSynthesizer");
    // Eno's lists allow a key twice and a dependency without a name; enoki's do not.
    let mut twice = c.clone();
    twice.spec.bindings.push(twice.spec.bindings[0].clone());
    twice
        .spec
        .depends_on
        .push(eno::CompositionDependency::default());
    let (word, err) = composition_spec(&twice).unwrap_err();
    assert_eq!(word, "InvalidSpec");
    assert!(
        err.contains("spec.bindings") && err.contains("\"config\""),
        "{err}"
    );
    twice.spec.bindings.pop();
    assert_eq!(composition_spec(&twice).unwrap().depends_on.len(), 1);
}

#[test]
fn an_eno_symphony_spec_is_its_mirrors() {
    let s: eno::Symphony = serde_saphyr::from_str(
        "apiVersion: eno.azure.io/v1\nkind: Symphony\nmetadata: {name: stack, namespace: shop}\n\
         spec:\n  bindings:\n  - key: config\n    resource: {name: cfg}\n  variations:\n\
         \x20 - synthesizer: {name: a}\n    labels: {tier: one}\n    synthesisEnv: [{name: X, value: '1'}]\n\
         \x20 - synthesizer: {name: b}\n    optional: true\n    dependsOn: [{synthesizer: a}]\n",
    )
    .unwrap();
    let spec = symphony_spec(&s).unwrap();
    assert_eq!(spec.variations.len(), 2);
    assert_eq!(spec.variations[0].labels["tier"], "one");
    assert!(spec.variations[1].optional);
    assert_eq!(spec.variations[1].depends_on[0].synthesizer, "a");
    assert_eq!(spec.bindings[0].key, "config");
}

#[test]
fn an_eno_synthesizer_names_its_module_by_annotation_or_image() {
    let mut s: eno::Synthesizer = serde_saphyr::from_str(
        "apiVersion: eno.azure.io/v1\nkind: Synthesizer\nmetadata: {name: web}\n\
         spec:\n  image: registry.example/web:v2\n  execTimeout: 10s\n  refs:\n\
         \x20 - key: config\n    resource: {group: '', kind: ConfigMap}\n\
         \x20 - key: app\n    resource: {group: apps, version: v1, kind: Deployment, name: web, namespace: shop}\n    defer: true\n",
    )
    .unwrap();
    let module = module_of(&s).unwrap();
    assert_eq!(module.oci.as_deref(), Some("registry.example/web:v2"));
    let spec = synthesizer_spec(&s, module.clone()).unwrap();
    assert_eq!(spec.refs[0].resource.as_ref().unwrap().version, "v1");
    let app = spec.refs[1].resource.as_ref().unwrap();
    assert_eq!(
        (app.name.as_deref(), app.namespace.as_deref()),
        (Some("web"), Some("shop"))
    );
    assert!(spec.refs[1].defer);
    assert_eq!(spec.limits.unwrap().timeout.as_deref(), Some("10s"));
    s.annotations_mut()
        .insert(MODULE.into(), "builtin:trustee".into());
    assert_eq!(module_of(&s).unwrap().builtin.as_deref(), Some("trustee"));
    s.annotations_mut().clear();
    s.spec.image.clear();
    let err = module_of(&s).unwrap_err();
    assert!(err.contains("spec.image") && err.contains(MODULE), "{err}");
}

/// The mirror's status in Eno's shape: enoki's fields (conditions, digests) left out, the
/// mirror's generation read back as the Eno object's, an earlier synthesis's kept as the
/// Eno status had it.
#[test]
fn a_mirrors_status_is_written_in_enos_shape_with_enos_generations() {
    let mut mirror: crds::Composition = serde_json::from_value(json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "web", "namespace": "shop", "generation": 5,
                     "annotations": {GENERATION: "2"}},
        "spec": {"synthesizer": {"name": "web-synth"}},
        "status": {
            "observedGeneration": 5,
            "conditions": [{"type": "Ready", "status": "True", "reason": "AllReady",
                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "simplified": {"status": "Ready"},
            "currentSynthesis": {"uuid": "b", "observedCompositionGeneration": 5,
                "observedSynthesizerGeneration": 7, "moduleDigest": "sha256:00",
                "synthesized": "2026-01-01T00:00:00Z", "ready": "2026-01-01T00:00:01Z",
                "attempts": 1, "resourceSlices": [{"name": "web-x"}]},
            "previousSynthesis": {"uuid": "a", "observedCompositionGeneration": 4}
        }
    }))
    .unwrap();
    let before = eno::CompositionStatus {
        current_synthesis: Some(eno::Synthesis {
            uuid: "a".into(),
            observed_composition_generation: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    };
    let out = composition_status(&mirror, (Some(7), Some(1)), Some(&before));
    let json = to_json(&out);
    assert_eq!(json["simplified"]["status"], "Ready");
    assert_eq!(json["currentSynthesis"]["observedCompositionGeneration"], 2);
    assert_eq!(json["currentSynthesis"]["observedSynthesizerGeneration"], 1);
    assert_eq!(
        json["currentSynthesis"]["resourceSlices"][0]["name"],
        "web-x"
    );
    assert_eq!(
        json["previousSynthesis"]["observedCompositionGeneration"],
        1
    );
    assert!(json.get("conditions").is_none() && json.get("observedGeneration").is_none());
    assert!(json["currentSynthesis"].get("moduleDigest").is_none());
    // A mirror that has not synthesized yet keeps what Eno did last to be read.
    mirror.status = None;
    assert_eq!(
        composition_status(&mirror, (None, None), Some(&before)),
        before
    );
    mirror.status = Some(crds::CompositionStatus::default());
    let kept = composition_status(&mirror, (None, None), Some(&before));
    assert_eq!(kept.current_synthesis, before.current_synthesis);
    mirror.status = None;
    assert_eq!(
        composition_status(&mirror, (None, None), None),
        eno::CompositionStatus::default()
    );
    // Refs whose keys Eno's lists allow twice have no mirror.
    let mut s: eno::Synthesizer = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "Synthesizer", "metadata": {"name": "s"},
        "spec": {"image": "r/s:v1", "refs": [{"key": "a", "resource": {"kind": "ConfigMap"}}]}}))
    .unwrap();
    s.spec.refs.push(s.spec.refs[0].clone());
    let err = synthesizer_spec(&s, module_of(&s).unwrap()).unwrap_err();
    assert!(err.contains("spec.refs") && err.contains("twice"), "{err}");
}

#[test]
fn a_mirror_carries_the_eno_objects_labels_and_annotations_but_kubectls_copy() {
    let c = eno_comp(
        "apiVersion: eno.azure.io/v1\nkind: Composition\nmetadata:\n  name: web\n  namespace: shop\n  generation: 4\n\
         \x20 labels: {team: a}\n  annotations:\n    eno.azure.io/deletion-strategy: orphan\n\
         \x20   kubectl.kubernetes.io/last-applied-configuration: '{}'\nspec: {synthesizer: {name: s}}\n",
    );
    let (labels, annotations) = mirror_meta(&c);
    assert_eq!(labels["team"], "a");
    assert_eq!(labels[MIRROR], "true");
    assert_eq!(annotations["eno.azure.io/deletion-strategy"], "orphan");
    assert_eq!(annotations[GENERATION], "4");
    assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
}

/// Eno's CRDs do not require `spec`: such an object reads (an empty spec) and says what it
/// lacks, so one tenant's odd object never stops a list of its kind.
#[test]
fn an_eno_object_without_a_spec_reads_and_says_what_it_lacks() {
    let bare: eno::Composition = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "Composition",
        "metadata": {"name": "bare", "namespace": "shop"}}))
    .unwrap();
    let (word, _) = composition_spec(&bare).unwrap_err();
    assert_eq!(word, "MissingSynthesizer");
    let list: kube::core::ObjectList<eno::Symphony> = serde_json::from_value(json!({
        "apiVersion": "eno.azure.io/v1", "kind": "SymphonyList", "metadata": {},
        "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"},
                   "spec": {"variations": [{"synthesizer": {"name": "s"}}]}}]}))
    .unwrap();
    assert_eq!(list.items.len(), 2);
    assert!(symphony_spec(&list.items[0]).unwrap().variations.is_empty());
}

#[test]
fn enokis_own_input_keys_stay_out_of_enos_status() {
    let mirror: crds::Composition = serde_json::from_value(json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"synthesizer": {"name": "s"}},
        "status": {"inputRevisions": [{"key": "config", "resourceVersion": "1"},
                                      {"key": "enoki.dev/observed", "resourceVersion": "2"}]}
    }))
    .unwrap();
    let out = composition_status(&mirror, (None, None), None);
    let keys: Vec<&str> = out.input_revisions.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(keys, ["config"]);
}

/// Inputs in lockstep name the Eno object's generation: a mirror (which its module
/// annotation or an undone edit may have moved ahead) is compared by the Eno generation it
/// was written from; any other object by its own.
#[test]
fn lockstep_compares_a_mirror_by_its_eno_generation() {
    let mut mirror = crds::Composition::new("app", Default::default());
    mirror.metadata.generation = Some(4);
    mirror.metadata.annotations = Some([(GENERATION.to_string(), "2".to_string())].into());
    assert_eq!(
        lockstep_generation(&mirror),
        Some(4),
        "not labelled a mirror"
    );
    mirror.metadata.labels = Some([(MIRROR.to_string(), "true".to_string())].into());
    assert_eq!(
        lockstep_generation(&mirror),
        Some(4),
        "labelled, but no Eno object owns it"
    );
    mirror.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "eno.azure.io/v1".into(),
            kind: "Composition".into(),
            name: "app".into(),
            uid: "u".into(),
            ..Default::default()
        },
    ]);
    assert_eq!(lockstep_generation(&mirror), Some(2));
    mirror.metadata.annotations = None;
    assert_eq!(
        lockstep_generation(&mirror),
        Some(4),
        "no Eno generation recorded"
    );
}
