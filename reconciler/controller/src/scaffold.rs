//! `enoki new <name> --lang …`: scaffold a synthesizer project that builds and passes its own
//! test out of the box. Every language emits the same resource from the same fixture, so all
//! six projects share one golden file; the templates are in `templates/new/` (compiled in).
//!
//! A project depends on the SDK package of this enoki's version ([`SDK_VERSION`]) as its
//! ecosystem does — the `enoki-sdk` crate, the Go module
//! `github.com/enoki-dev/enoki/synthesizer-sdk/go`, the npm packages `@enoki/sdk` and
//! `enoki-sdk-assemblyscript`, the Python distribution `enoki-sdk`; C gets the header
//! (`enoki.h`) copied in. The packed files of that version (`hack/sdk-packages.sh`) shipped
//! beside the binary — or named by `--sdk-packages DIR` — are copied into the project
//! (`sdk-packages/`, the files its language needs) and installed from there by relative path,
//! so the project builds wherever it is moved; without them, or with `--sdk-registry`, the
//! packages come from the registries. `--sdk-dir` (or `$ENOKI_SDK_DIR`) uses a checkout by
//! path.

use std::path::PathBuf;

use crate::cli::{Lang, NewArgs};

mod templates;

mod sdk;
pub use sdk::{SDK_VERSION, SdkSource};
use sdk::{VENDORED, copy_tree, sdk_source, vendored_files};

/// Why `enoki new` failed.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The project name is not a DNS-1123 label.
    #[error(
        "project name {0:?} must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
    )]
    Name(String),
    /// The target directory exists and is not empty.
    #[error("{0} exists and is not empty (choose another --dir or remove it)")]
    NotEmpty(String),
    /// No SDK directory or packages.
    #[error(
        "cannot find the enoki SDK ({0}): pass --sdk-dir <checkout>/synthesizer-sdk (or set ENOKI_SDK_DIR), or --sdk-packages <dir of hack/sdk-packages.sh>"
    )]
    Sdk(String),
    /// Writing a file failed.
    #[error("{path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

const COMMON: &[(&str, &str)] = &[
    (
        "fixtures/input.json",
        include_str!("../templates/new/common/fixtures/input.json"),
    ),
    (
        "fixtures/expected.yaml",
        include_str!("../templates/new/common/fixtures/expected.yaml"),
    ),
    (
        "README.md",
        include_str!("../templates/new/common/README.md"),
    ),
    (
        "composition.yaml",
        include_str!("../templates/new/common/composition.yaml"),
    ),
];

const MAKEFILE_TAIL: &str = include_str!("../templates/new/common/Makefile.tail");

/// The language's own files (its Makefile gets the common test targets appended).
fn files(lang: Lang) -> &'static [(&'static str, &'static str)] {
    match lang {
        Lang::Rust => templates::RUST,
        Lang::Helm => templates::HELM,
        Lang::Go => templates::GO,
        Lang::C => templates::C,
        Lang::Assemblyscript => templates::ASSEMBLYSCRIPT,
        Lang::Python => templates::PYTHON,
        Lang::Typescript => templates::TYPESCRIPT,
    }
}

/// What differs per language in the README and the Synthesizer.
struct Flavour {
    title: &'static str,
    module_kind: &'static str,
    /// Components of several MiB do not fit a ConfigMap (1 MiB): they go to a registry.
    oci: bool,
}

fn flavour(lang: Lang) -> Flavour {
    let (title, module_kind, oci) = match lang {
        Lang::Rust => ("Rust", "WASI preview1 module, ~0.3 MB", false),
        Lang::Go => ("Go", "WASI preview1 module, ~2 MB", false),
        Lang::C => ("C", "WASI preview1 module, ~20 KB", false),
        Lang::Assemblyscript => ("AssemblyScript", "WASI preview1 module, ~40 KB", false),
        Lang::Python => ("Python", "wasi:cli/command component, ~18 MB", true),
        Lang::Typescript => ("TypeScript", "wasi:cli/command component, ~14 MB", true),
        Lang::Helm => ("Helm chart (Go)", "WASI preview1 module, ~41 MB", true),
    };
    Flavour {
        title,
        module_kind,
        oci,
    }
}

/// What the README adds for a language.
fn lang_note(lang: Lang) -> &'static str {
    match lang {
        Lang::Helm => {
            "\n\nThe ConfigMap comes from the Helm chart in `chart/`, embedded in the module and \
             rendered with Helm's own engine: `helm template <composition> chart/` prints the same \
             objects. Edit the chart (or put your own there) and `values` in `main.go`, which maps \
             the inputs to the chart's values. A packaged chart needs no code at all: the built-in \
             `helm` synthesizer renders it (enoki's docs/from-helm.md)."
        }
        _ => "",
    }
}

/// Whether `name` is a DNS-1123 label (it names the Synthesizer and the module).
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// The placeholders that say where the SDK comes from.
fn sdk_placeholders(lang: Lang, sdk: &SdkSource) -> Vec<(&'static str, String)> {
    let v = SDK_VERSION;
    let go_module = "github.com/enoki-dev/enoki/synthesizer-sdk/go";
    let (rust_dep, rust_patch, go_replace, go_env, npm, npm_as, origin) = match sdk {
        SdkSource::Registry => (
            format!("\"{v}\""),
            String::new(),
            String::new(),
            String::new(),
            v.to_string(),
            v.to_string(),
            format!("version {v}"),
        ),
        SdkSource::Dir(d) => (
            format!("{{ path = \"{}\" }}", d.display()),
            String::new(),
            format!("\nreplace {go_module} => {}/go\n", d.display())
                + &if lang == Lang::Helm {
                    format!("\nreplace {go_module}/helm => {}/go/helm\n", d.display())
                } else {
                    String::new()
                },
            String::new(),
            format!("file:{}/js", d.display()),
            format!("file:{}/assemblyscript", d.display()),
            d.display().to_string(),
        ),
        // The packages copied into the project ([`VENDORED`]), by relative path.
        SdkSource::Packages(d) => (
            format!("\"{v}\""),
            format!(
                "\n# The packed crate (in {VENDORED}/) stands in for the published one.\n[patch.crates-io]\nenoki-sdk = {{ path = \"{VENDORED}/rust/enoki-sdk-{v}\" }}\n"
            ),
            String::new(),
            format!(
                "# The SDK's Go modules come from the packed proxy directory in {VENDORED}/, the rest from Go's own proxy.\nexport GOPROXY := file://$(CURDIR)/{VENDORED}/go,$(shell go env GOPROXY)\nexport GONOSUMDB := $(shell go env GONOSUMDB),{go_module}\nexport GOFLAGS := -mod=mod\n"
            ),
            format!("file:{VENDORED}/npm/enoki-sdk-{v}.tgz"),
            format!("file:{VENDORED}/npm/enoki-sdk-assemblyscript-{v}.tgz"),
            format!("packages from {} in {VENDORED}/", d.display()),
        ),
    };
    // The WIT files ship inside the Python and npm packages.
    let wit_dir = match (sdk, lang) {
        (SdkSource::Dir(d), _) => format!("{}/wit", d.display()),
        (_, Lang::Python) => ".venv/enoki-sdk/enoki_sdk/wit".to_string(),
        _ => "node_modules/@enoki/sdk/wit".to_string(),
    };
    let (py_sdk_path, py_install) = python_sdk(sdk);
    vec![
        ("{{rust_dep}}", rust_dep),
        ("{{rust_patch}}", rust_patch),
        ("{{go_replace}}", go_replace),
        ("{{go_helm_replace}}", String::new()),
        ("{{go_env}}", go_env),
        ("{{npm_sdk}}", npm),
        ("{{npm_sdk_as}}", npm_as),
        ("{{sdk_origin}}", origin),
        ("{{py_sdk_path}}", py_sdk_path),
        ("{{py_install_sdk}}", py_install),
        ("{{version}}", v.to_string()),
        ("{{wit_dir}}", wit_dir),
    ]
}

/// The Python SDK's path for componentize-py and the command that installs it.
fn python_sdk(sdk: &SdkSource) -> (String, String) {
    let v = SDK_VERSION;
    match sdk {
        SdkSource::Dir(d) => (format!("-p {}/python", d.display()), "true".to_string()),
        other => {
            let what = match other {
                SdkSource::Packages(_) => {
                    format!("{VENDORED}/python/enoki_sdk-{v}-py3-none-any.whl")
                }
                _ => format!("enoki-sdk=={v}"),
            };
            (
                "-p .venv/enoki-sdk".to_string(),
                format!(
                    ".venv/bin/pip install -q --disable-pip-version-check --target .venv/enoki-sdk '{what}'"
                ),
            )
        }
    }
}

/// The project's files with placeholders filled: `(relative path, content)`.
fn render(name: &str, lang: Lang, sdk: &SdkSource) -> Vec<(String, String)> {
    let placeholders = sdk_placeholders(lang, sdk);
    let f = flavour(lang);
    let (source, comment, hint) = if f.oci {
        (
            "    # enoki module push build/{{name}}.wasm <registry>/{{name}}:0.1.0 prints the digest\n    oci: <registry>/{{name}}:0.1.0@sha256:<digest>".to_string(),
            "# The component is several MiB: publish it to an OCI registry and pin it by digest:\n#   enoki module push build/{{name}}.wasm <registry>/{{name}}:0.1.0\n".to_string(),
            "publish the module with `enoki module push` and put its digest in `composition.yaml`",
        )
    } else {
        (
            "    configMap: {namespace: enoki-system, name: {{name}}-module, key: module.wasm}".to_string(),
            "# Store the module (gzip keeps it under the 1 MiB ConfigMap limit) before applying:\n#   gzip -9 -c build/{{name}}.wasm > build/{{name}}.wasm.gz\n#   kubectl -n enoki-system create configmap {{name}}-module --from-file=module.wasm=build/{{name}}.wasm.gz\n".to_string(),
            "store the module in the `{{name}}-module` ConfigMap first, as its comment shows",
        )
    };
    let fill = |t: &str| {
        let t = placeholders
            .iter()
            .fold(t.to_string(), |t, (k, v)| t.replace(k, v));
        t.replace("{{module_source}}", &source)
            .replace("{{publish_comment}}", &comment)
            .replace("{{publish_hint}}", hint)
            .replace("{{lang_title}}", f.title)
            .replace("{{lang_note}}", lang_note(lang))
            .replace("{{module_kind}}", f.module_kind)
            .replace("{{lang}}", lang.as_str())
            .replace("{{name}}", name)
    };
    let mut out: Vec<(String, String)> = COMMON
        .iter()
        .chain(files(lang))
        .map(|(path, text)| {
            let mut text = fill(text);
            if *path == "Makefile" {
                text.push_str(&fill(MAKEFILE_TAIL));
            }
            ((*path).to_string(), text)
        })
        .collect();
    out.sort();
    out
}

/// Runs `enoki new` and returns what to print (the files written and the next steps).
///
/// # Errors
/// A bad name, a non-empty target directory, no SDK, or a failed write.
pub fn scaffold(args: &NewArgs) -> Result<String, ScaffoldError> {
    if !valid_name(&args.name) {
        return Err(ScaffoldError::Name(args.name.clone()));
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    if std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_some()) {
        return Err(ScaffoldError::NotEmpty(dir.display().to_string()));
    }
    let sdk = sdk_source(args).map_err(ScaffoldError::Sdk)?;
    let origin = match &sdk {
        SdkSource::Registry => format!("SDK {SDK_VERSION}"),
        SdkSource::Dir(d) => format!("SDK {}", d.display()),
        SdkSource::Packages(d) => format!("SDK {SDK_VERSION} from {}", d.display()),
    };
    let mut report = format!(
        "created {} ({}, {origin}):\n",
        dir.display(),
        flavour(args.lang).title,
    );
    for (path, text) in render(&args.name, args.lang, &sdk) {
        let full = dir.join(&path);
        let write = || -> std::io::Result<()> {
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&full, text)
        };
        write().map_err(|source| ScaffoldError::Write {
            path: full.display().to_string(),
            source,
        })?;
        report.push_str(&format!("  {path}\n"));
    }
    if let SdkSource::Packages(from) = &sdk {
        for rel in vendored_files(args.lang) {
            let to = dir.join(VENDORED).join(&rel);
            copy_tree(&from.join(&rel), &to).map_err(|source| ScaffoldError::Write {
                path: to.display().to_string(),
                source,
            })?;
            report.push_str(&format!("  {VENDORED}/{rel}\n"));
        }
    }
    report.push_str(&format!(
        "next: cd {} && make test   (builds build/{}.wasm and checks it against fixtures/expected.yaml)\n",
        dir.display(),
        args.name
    ));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        assert!(valid_name("my-synth"));
        assert!(valid_name("a1"));
        for bad in ["", "-a", "a-", "My", "a_b", "a.b", &"x".repeat(64)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn every_language_fills_every_placeholder_and_has_a_makefile_with_test() {
        // By default a project depends on the published SDK of this version.
        let rust = render("x", Lang::Rust, &SdkSource::Registry);
        let cargo = &rust.iter().find(|(p, _)| p == "Cargo.toml").unwrap().1;
        assert!(
            cargo.contains(&format!("enoki-sdk = \"{SDK_VERSION}\"")),
            "{cargo}"
        );
        let go = render("x", Lang::Go, &SdkSource::Registry);
        let gomod = &go.iter().find(|(p, _)| p == "go.mod").unwrap().1;
        assert!(
            gomod.contains(&format!(
                "require github.com/enoki-dev/enoki/synthesizer-sdk/go v{SDK_VERSION}"
            )) && !gomod.contains("replace"),
            "{gomod}"
        );
        for lang in Lang::ALL {
            let sources = [
                SdkSource::Registry,
                SdkSource::Dir("/checkout/synthesizer-sdk".into()),
                SdkSource::Packages("/pkgs".into()),
            ];
            for sdk in &sources {
                for (path, text) in &render("demo-synth", *lang, sdk) {
                    // Helm templates keep their own `{{ … }}` (with spaces).
                    let unfilled = text.contains("{{") && !path.starts_with("chart/templates/");
                    assert!(!unfilled, "{lang:?} {sdk:?} {path}: {text}");
                    // Only a checkout or packed files put a local path in the project.
                    if *sdk == SdkSource::Registry {
                        assert!(
                            !text.contains("/checkout") && !text.contains("file:"),
                            "{path}"
                        );
                    }
                }
            }
            let files = render("demo-synth", *lang, &SdkSource::Registry);
            let make = &files.iter().find(|(p, _)| p == "Makefile").unwrap().1;
            assert!(
                make.contains("build:") && make.contains("test: build"),
                "{make}"
            );
            assert!(
                make.lines().filter(|l| l.starts_with("\t")).count() >= 3,
                "recipes are tab-indented"
            );
            let comp = &files
                .iter()
                .find(|(p, _)| p == "composition.yaml")
                .unwrap()
                .1;
            let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(comp).unwrap();
            assert_eq!(docs[0]["kind"], "Synthesizer", "{comp}");
            assert_eq!(docs[0]["metadata"]["name"], "demo-synth");
        }
    }
}
