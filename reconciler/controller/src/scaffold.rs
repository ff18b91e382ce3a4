//! `enoki new <name> --lang …`: scaffold a synthesizer project that builds and passes its own
//! test out of the box. Every language emits the same resource from the same fixture, so all
//! six projects share one golden file; the templates are in `templates/new/` (compiled in).
//!
//! A project refers to the SDK by path (`--sdk-dir`, default `$ENOKI_SDK_DIR`, else the
//! `synthesizer-sdk/` of the checkout enoki was built from): the SDKs are not published to a
//! registry yet.

use std::path::{Path, PathBuf};

use crate::cli::{Lang, NewArgs};

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
    /// No SDK directory.
    #[error(
        "cannot find the enoki SDK ({0}): pass --sdk-dir <checkout>/synthesizer-sdk or set ENOKI_SDK_DIR"
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
        Lang::Rust => &[
            (
                "Cargo.toml",
                include_str!("../templates/new/rust/Cargo.toml"),
            ),
            (
                "src/main.rs",
                include_str!("../templates/new/rust/src/main.rs"),
            ),
            ("Makefile", include_str!("../templates/new/rust/Makefile")),
            (
                ".gitignore",
                include_str!("../templates/new/rust/.gitignore"),
            ),
        ],
        Lang::Go => &[
            ("go.mod", include_str!("../templates/new/go/go.mod")),
            ("main.go", include_str!("../templates/new/go/main.go")),
            ("Makefile", include_str!("../templates/new/go/Makefile")),
            (".gitignore", include_str!("../templates/new/go/.gitignore")),
        ],
        Lang::C => &[
            ("main.c", include_str!("../templates/new/c/main.c")),
            ("Makefile", include_str!("../templates/new/c/Makefile")),
            (".gitignore", include_str!("../templates/new/c/.gitignore")),
        ],
        Lang::Assemblyscript => &[
            (
                "package.json",
                include_str!("../templates/new/assemblyscript/package.json"),
            ),
            (
                "assembly/index.ts",
                include_str!("../templates/new/assemblyscript/assembly/index.ts"),
            ),
            (
                "Makefile",
                include_str!("../templates/new/assemblyscript/Makefile"),
            ),
            (
                ".gitignore",
                include_str!("../templates/new/assemblyscript/.gitignore"),
            ),
        ],
        Lang::Python => &[
            ("app.py", include_str!("../templates/new/python/app.py")),
            (
                "requirements.txt",
                include_str!("../templates/new/python/requirements.txt"),
            ),
            ("Makefile", include_str!("../templates/new/python/Makefile")),
            (
                ".gitignore",
                include_str!("../templates/new/python/.gitignore"),
            ),
        ],
        Lang::Typescript => &[
            (
                "package.json",
                include_str!("../templates/new/typescript/package.json"),
            ),
            (
                "tsconfig.json",
                include_str!("../templates/new/typescript/tsconfig.json"),
            ),
            (
                "src/main.ts",
                include_str!("../templates/new/typescript/src/main.ts"),
            ),
            // The same build script as samples/10-typescript.
            (
                "build.mjs",
                include_str!("../../../samples/10-typescript/build.mjs"),
            ),
            (
                "Makefile",
                include_str!("../templates/new/typescript/Makefile"),
            ),
            (
                ".gitignore",
                include_str!("../templates/new/typescript/.gitignore"),
            ),
        ],
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
    };
    Flavour {
        title,
        module_kind,
        oci,
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

fn sdk_dir(args: &NewArgs) -> Result<PathBuf, ScaffoldError> {
    let candidate = args
        .sdk_dir
        .clone()
        .or_else(|| std::env::var_os("ENOKI_SDK_DIR").map(PathBuf::from))
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../synthesizer-sdk"));
    let dir = candidate
        .canonicalize()
        .map_err(|e| ScaffoldError::Sdk(format!("{}: {e}", candidate.display())))?;
    if !dir.join("CONTRACT.md").exists() {
        return Err(ScaffoldError::Sdk(format!(
            "{} has no CONTRACT.md",
            dir.display()
        )));
    }
    Ok(dir)
}

/// The project's files with placeholders filled: `(relative path, content)`.
fn render(name: &str, lang: Lang, sdk: &Path) -> Vec<(String, String)> {
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
        t.replace("{{module_source}}", &source)
            .replace("{{publish_comment}}", &comment)
            .replace("{{publish_hint}}", hint)
            .replace("{{lang_title}}", f.title)
            .replace("{{module_kind}}", f.module_kind)
            .replace("{{lang}}", lang.as_str())
            .replace("{{sdk}}", &sdk.display().to_string())
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
    let sdk = sdk_dir(args)?;
    let mut report = format!(
        "created {} ({}, SDK {}):\n",
        dir.display(),
        flavour(args.lang).title,
        sdk.display()
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
        for lang in Lang::ALL {
            let files = render("demo-synth", *lang, Path::new("/sdk"));
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
            }
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
