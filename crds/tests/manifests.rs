//! The committed CRD YAML must be exactly what the types generate.

#[test]
fn manifests_are_up_to_date() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in [root.join("manifests"), root.join("../deploy/base/crds")] {
        for (file, yaml) in crds::manifests::render().unwrap() {
            let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_else(|e| {
                panic!("{file} is missing ({e}); run `cargo run -p crds --bin crdgen`")
            });
            assert_eq!(
                committed,
                yaml,
                "{file} in {} is stale; run `cargo run -p crds --bin crdgen` and commit the result",
                dir.display()
            );
        }
    }
    for dir in [
        root.join("manifests/eno"),
        root.join("../deploy/eno-api/crds"),
    ] {
        for (file, yaml) in crds::manifests::render_eno().unwrap() {
            let committed = std::fs::read_to_string(dir.join(&file)).unwrap_or_default();
            assert_eq!(
                committed,
                yaml,
                "{file} in {} is stale; run `cargo run -p crds --bin crdgen`",
                dir.display()
            );
        }
    }
}

#[test]
fn builtin_crds_parse_and_deploy_has_the_same_copy() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let crds = crds::manifests::builtins().unwrap();
    let names: Vec<String> = crds
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "trusteeconfigs.confidentialcontainers.org",
            "kbsconfigs.confidentialcontainers.org",
            "clusterresourcequotas.quota.powerapp.cloud",
            "leptondeployments.lepton.ai"
        ]
    );
    for (file, yaml) in crds::manifests::BUILTIN_YAML {
        let copy = std::fs::read_to_string(root.join("../deploy/base/crds/builtins").join(file))
            .unwrap_or_default();
        assert_eq!(
            &copy, yaml,
            "deploy/base/crds/builtins/{file} is stale: run `make crds`"
        );
    }
}

#[test]
fn every_key_has_an_eno_alias() {
    for key in crds::names::annotations::ALL {
        assert_eq!(
            key.enoki.strip_prefix("enoki.dev/"),
            key.eno.strip_prefix("eno.azure.io/")
        );
        assert!(key.matches(key.enoki) && key.matches(key.eno));
    }
}

#[test]
fn composition_crd_has_status_columns_and_short_name() {
    use kube::CustomResourceExt;
    let crd = crds::Composition::crd();
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&["comp".to_string()][..])
    );
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        columns,
        [
            "Synthesizer",
            "Status",
            "Ready",
            "Error",
            "Synthesized",
            "Age"
        ]
    );
    assert_eq!(crds::Synthesizer::crd().spec.scope, "Cluster");
}

#[test]
fn every_crd_is_in_the_enoki_category_with_a_short_name_and_documented() {
    use kube::CustomResourceExt;
    for (crd, short) in [
        (crds::Composition::crd(), "comp"),
        (crds::Synthesizer::crd(), "synth"),
        (crds::Symphony::crd(), "sym"),
        (crds::ResourceSlice::crd(), "rslice"),
    ] {
        let names = &crd.spec.names;
        assert_eq!(
            names.categories.as_deref(),
            Some(&["enoki".to_string()][..])
        );
        assert_eq!(names.short_names.as_deref(), Some(&[short.to_string()][..]));
        let yaml = serde_json::to_string(&crd).unwrap();
        assert!(
            !yaml.contains("Auto-generated"),
            "{}: kubectl explain shows documentation, not a generated placeholder",
            names.kind
        );
    }
}
