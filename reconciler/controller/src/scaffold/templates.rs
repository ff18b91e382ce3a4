//! The files `enoki new` writes per language, built into the binary: the templates under
//! `templates/new/<language>/` (paths relative to the project), and the few files shared
//! with the SDK or the samples.

/// The files of a template: `(path in the project, contents)`.
type Files = &'static [(&'static str, &'static str)];

/// Each named file of `templates/new/<lang>/`.
macro_rules! template {
    ($lang:literal: $($path:literal),+ $(,)?) => {
        &[$(($path, include_str!(concat!("../../templates/new/", $lang, "/", $path)))),+]
    };
}

pub(super) const RUST: Files =
    template!("rust": "Cargo.toml", "src/main.rs", "Makefile", ".gitignore");

pub(super) const HELM: Files = template!("helm":
    "go.mod",
    "main.go",
    "Makefile",
    ".gitignore",
    "chart/Chart.yaml",
    "chart/values.yaml",
    "chart/templates/configmap.yaml",
);

pub(super) const GO: Files = template!("go": "go.mod", "main.go", "Makefile", ".gitignore");

/// The SDK is one header: the project keeps its copy.
pub(super) const C: Files = &[
    ("main.c", include_str!("../../templates/new/c/main.c")),
    (
        "enoki.h",
        include_str!("../../../../synthesizer-sdk/c/enoki.h"),
    ),
    ("Makefile", include_str!("../../templates/new/c/Makefile")),
    (
        ".gitignore",
        include_str!("../../templates/new/c/.gitignore"),
    ),
];

pub(super) const ASSEMBLYSCRIPT: Files = template!("assemblyscript":
    "package.json",
    "assembly/index.ts",
    "Makefile",
    ".gitignore",
);

pub(super) const PYTHON: Files =
    template!("python": "app.py", "requirements.txt", "Makefile", ".gitignore");

/// The same build script as samples/10-typescript.
pub(super) const TYPESCRIPT: Files = &[
    (
        "package.json",
        include_str!("../../templates/new/typescript/package.json"),
    ),
    (
        "tsconfig.json",
        include_str!("../../templates/new/typescript/tsconfig.json"),
    ),
    (
        "src/main.ts",
        include_str!("../../templates/new/typescript/src/main.ts"),
    ),
    (
        "build.mjs",
        include_str!("../../../../samples/10-typescript/build.mjs"),
    ),
    (
        "Makefile",
        include_str!("../../templates/new/typescript/Makefile"),
    ),
    (
        ".gitignore",
        include_str!("../../templates/new/typescript/.gitignore"),
    ),
];
