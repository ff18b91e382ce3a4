//! `enoki render`: run a synthesizer over local files with the controller's own code and
//! limits, then print the resources in apply order grouped by readiness group.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{Format, RenderArgs};

mod cache;
use crate::synthesis::{self, CompositionMeta, Module, SynthesisInput};
pub use cache::cache_dir;
use cache::cached_host;

/// Why `enoki render` failed: one paragraph for the user.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A file could not be read or parsed.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Bad command-line value.
    #[error("{0}")]
    Usage(String),
    /// `--expect`: the output is not the golden file's.
    #[error(
        "the output differs from {path} (regenerate it with `enoki render … > {path}` if the change is intended):\n{diff}"
    )]
    Mismatch {
        /// The golden file.
        path: String,
        /// Unified diff, golden → rendered.
        diff: String,
    },
    /// The module could not be loaded.
    #[error("cannot load module {module}")]
    Load {
        /// The module argument.
        module: String,
        /// Why.
        #[source]
        source: wasm_host::HostError,
    },
    /// The synthesis failed.
    #[error("synthesis failed ({})", source.reason())]
    Synthesis {
        /// Why.
        #[source]
        source: synthesis::SynthesisError,
    },
    /// The output could not be planned (cycle).
    #[error("cannot order the output: {0}")]
    Plan(#[from] plan::PlanError),
}

fn read_object(path: &Path) -> Result<Value, RenderError> {
    let text = std::fs::read_to_string(path).map_err(|e| RenderError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    let parsed: Result<Value, String> = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| e.to_string())
    } else {
        serde_saphyr::from_str(&text).map_err(|e| e.to_string())
    };
    parsed.map_err(|message| RenderError::File {
        path: path.display().to_string(),
        message,
    })
}

fn strings(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Loads the module named on the command line.
///
/// # Errors
/// Unknown built-ins, unreadable files, modules that do not compile.
pub fn load_module(
    host: &wasm_host::Host,
    arg: &str,
    sha256: Option<&str>,
    ca_file: Option<&Path>,
    policy: &crate::sources::FetchPolicy,
) -> Result<Module, RenderError> {
    if let Some(name) = arg.strip_prefix("builtin:") {
        if name == "helm" {
            return Err(RenderError::Usage(
                "builtin:helm is a wasm module (the one `enoki run --helm-module` names: \
                 /usr/lib/enoki/helm.wasm in the image, target/samples/helm-chart.wasm from \
                 source): render that file with the packaged chart bound as input `chart` (a \
                 ConfigMap with binaryData chart.tgz) and the values as input `values`"
                    .into(),
            ));
        }
        return match builtins::lookup(name) {
            Some(run) => Ok(Module::Builtin {
                name: name.to_string(),
                run,
            }),
            None => Err(RenderError::Usage(format!(
                "unknown built-in synthesizer {name:?} (known: {})",
                builtins::NAMES.join(", ")
            ))),
        };
    }
    let bytes = if Path::new(arg).exists() {
        std::fs::read(arg).map_err(|e| RenderError::File {
            path: arg.to_string(),
            message: e.to_string(),
        })?
    } else if arg.starts_with("https://") || arg.contains("@sha256:") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| RenderError::Usage(e.to_string()))?;
        let ca = match ca_file {
            Some(p) => Some(std::fs::read(p).map_err(|e| RenderError::File {
                path: p.display().to_string(),
                message: e.to_string(),
            })?),
            None => None,
        };
        let fetched = if arg.starts_with("https://") {
            rt.block_on(crate::sources::fetch_url(
                arg,
                sha256,
                ca.as_deref(),
                policy,
            ))
        } else {
            rt.block_on(crate::sources::pull(
                arg,
                policy,
                crate::sources::for_reference(arg).as_ref(),
                ca.as_deref(),
            ))
        };
        fetched.map_err(|e| RenderError::Usage(format!("cannot fetch module {arg}: {e}")))?
    } else {
        return Err(RenderError::File {
            path: arg.to_string(),
            message: "no such file (and not an https URL or an OCI reference pinned with @sha256:)"
                .into(),
        });
    };
    if bytes.len() > 1 << 20 {
        crate::progress(&format!(
            "compiling {arg} ({:.1} MiB)…",
            bytes.len() as f64 / f64::from(1 << 20)
        ));
    }
    let m = host.load(&bytes).map_err(|source| RenderError::Load {
        module: arg.to_string(),
        source,
    })?;
    Ok(Module::Wasm(m))
}

/// The host, module, input and limits of a render (shared with `enoki diff`'s local mode).
///
/// # Errors
/// A [`RenderError`] naming the file or flag.
pub fn prepare(
    args: &RenderArgs,
) -> Result<
    (
        wasm_host::Host,
        Module,
        SynthesisInput,
        wasm_host::RunLimits,
    ),
    RenderError,
> {
    let limits = synthesis::run_limits(Some(&crds::Limits {
        timeout: Some(args.timeout.clone()),
        memory: Some(args.memory.clone()),
        output: Some(args.max_output.clone()),
    }))
    .map_err(RenderError::Usage)?;
    let host = cached_host(args).map_err(|source| RenderError::Load {
        module: args.module.clone(),
        source,
    })?;
    let policy = crate::sources::FetchPolicy {
        max_bytes: synthesis::parse_quantity(&args.max_module_size)
            .map_err(|e| RenderError::Usage(format!("--max-module-size: {e}")))?,
        allow_private_redirects: args.allow_private_redirects,
        ..crate::sources::FetchPolicy::default()
    };
    let started = std::time::Instant::now();
    let module = load_module(
        &host,
        &args.module,
        args.sha256.as_deref(),
        args.ca_file.as_deref(),
        &policy,
    )?;
    if args.timings {
        let how = match (host.compilations(), cache_dir(args)) {
            (0, Some(dir)) if host.cache_hits() > 0 => {
                format!("loaded from the compile cache ({})", dir.display())
            }
            (0, _) => "built in".into(),
            (_, Some(dir)) => format!("compiled (kept in {})", dir.display()),
            (_, None) => "compiled (no cache)".into(),
        };
        eprintln!("module: {how} in {:.2} s", started.elapsed().as_secs_f64());
    }
    let input = synthesis_input(args)?;
    Ok((host, module, input, limits))
}

/// Runs `enoki render` and returns what to print.
///
/// # Errors
/// A [`RenderError`] with one clear paragraph.
pub fn render(args: &RenderArgs) -> Result<String, RenderError> {
    let (host, module, input, limits) = prepare(args)?;
    let started = std::time::Instant::now();
    let out = synthesis::synthesize(
        &host,
        &module,
        &input,
        limits,
        false,
        &synthesis::static_is_namespaced,
    )
    .map_err(|source| RenderError::Synthesis { source })?;
    if args.timings {
        eprintln!("synthesis: {:.2} s", started.elapsed().as_secs_f64());
    }
    let groups = readiness_groups(&out.items)?;
    Ok(match args.output {
        Format::Json => {
            let v = json!({
                "moduleDigest": module.digest(),
                "inputDigest": out.input_digest,
                "outputDigest": out.output_digest,
                "groups": groups.iter().map(|(g, items)| json!({"readinessGroup": g, "resources": items})).collect::<Vec<_>>(),
                "results": out.results,
            });
            serde_json::to_string_pretty(&v).unwrap_or_default() + "\n"
        }
        Format::Yaml => yaml(&module.digest(), &out, &groups),
    })
}

/// Whether a line is one of the digest comments `enoki render` starts with (they change with
/// every rebuild of a module, so golden files do not pin them).
fn is_digest_line(line: &str) -> bool {
    ["# module sha256:", "# input sha256:", "# output sha256:"]
        .iter()
        .any(|p| line.starts_with(p))
}

/// `enoki render --expect FILE`: compares the rendered text with the golden file, digest lines
/// aside, and returns a one-line confirmation.
///
/// # Errors
/// The golden file cannot be read, or the output differs: the message is a unified diff
/// (`-` the golden file, `+` this render).
pub fn check_expected(rendered: &str, golden: &Path) -> Result<String, RenderError> {
    let expected = std::fs::read_to_string(golden).map_err(|e| RenderError::File {
        path: golden.display().to_string(),
        message: e.to_string(),
    })?;
    let strip = |t: &str| -> String {
        t.lines()
            .filter(|l| !is_digest_line(l))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let (want, got) = (strip(&expected), strip(rendered));
    if want == got {
        return Ok(format!("{}: output matches", golden.display()));
    }
    let diff = similar::TextDiff::from_lines(&want, &got)
        .unified_diff()
        .context_radius(3)
        .header(&golden.display().to_string(), "rendered")
        .to_string();
    Err(RenderError::Mismatch {
        path: golden.display().to_string(),
        diff,
    })
}

/// The synthesis input from `--composition`, `--resource-list` and `--input` files.
fn synthesis_input(args: &RenderArgs) -> Result<SynthesisInput, RenderError> {
    let mut input = SynthesisInput {
        composition: CompositionMeta {
            name: "render".into(),
            namespace: "default".into(),
            uid: "render".into(),
            created: Duration::ZERO,
            ..CompositionMeta::default()
        },
        program: program_name(&args.module),
        // A render is not a synthesis of the cluster: a fixed, recognisable UUID.
        synthesis_uuid: "00000000-0000-0000-0000-000000000000".into(),
        ..SynthesisInput::default()
    };
    if let Some(path) = &args.composition {
        apply_composition(&mut input, &read_object(path)?);
    }
    if let Some(path) = &args.resource_list {
        apply_resource_list(&mut input, &read_object(path)?);
    }
    for spec in &args.inputs {
        let (key, file) = spec
            .split_once('=')
            .ok_or_else(|| RenderError::Usage(format!("--input {spec:?}: expected KEY=FILE")))?;
        input
            .inputs
            .push((key.to_string(), read_object(Path::new(file))?));
    }
    Ok(input)
}

/// `argv[0]` for a module given on the command line: its file stem, built-in or repository
/// name.
fn program_name(module: &str) -> String {
    let last = module
        .trim_start_matches("builtin:")
        .split(['@', '?'])
        .next()
        .unwrap_or(module)
        .rsplit('/')
        .next()
        .unwrap_or(module);
    let stem = last.split(':').next().unwrap_or(last);
    stem.trim_end_matches(".wasm")
        .trim_end_matches(".wat")
        .to_string()
}

/// Name, namespace, labels, annotations and `synthesisEnv` of a Composition file.
fn apply_composition(input: &mut SynthesisInput, comp: &Value) {
    let c = &mut input.composition;
    c.name = comp
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("render")
        .into();
    c.namespace = comp
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .into();
    c.labels = strings(comp.pointer("/metadata/labels").unwrap_or(&Value::Null));
    c.annotations = strings(
        comp.pointer("/metadata/annotations")
            .unwrap_or(&Value::Null),
    );
    for env in comp
        .pointer("/spec/synthesisEnv")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = env.get("name").and_then(Value::as_str) {
            let value = env.get("value").and_then(Value::as_str).unwrap_or_default();
            input.env.insert(name.into(), value.into());
        }
    }
}

/// Inputs (by `input-key`), observed outputs and `functionConfig` of a ResourceList file.
fn apply_resource_list(input: &mut SynthesisInput, list: &Value) {
    for item in list
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ann = item.pointer("/metadata/annotations");
        let get = |k: &crds::names::Key| {
            ann.and_then(|a| a.get(k.enoki).or_else(|| a.get(k.eno)))
                .and_then(Value::as_str)
        };
        if let Some(key) = get(&crds::names::annotations::INPUT_KEY) {
            input.inputs.push((key.to_string(), item.clone()));
        } else if get(&crds::names::annotations::OBSERVED) == Some("true") {
            input.observed.push(item.clone());
        }
    }
    if let Some(fc) = list.get("functionConfig") {
        let c = &mut input.composition;
        if let Some(n) = fc.pointer("/composition/name").and_then(Value::as_str) {
            c.name = n.into();
        }
        if let Some(n) = fc.pointer("/composition/namespace").and_then(Value::as_str) {
            c.namespace = n.into();
        }
        input
            .env
            .extend(strings(fc.get("env").unwrap_or(&Value::Null)));
        input.optional_refs.extend(
            fc.get("optionalRefs")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from),
        );
    }
}

/// The resources in apply order, grouped by readiness group.
fn readiness_groups(items: &[Value]) -> Result<Vec<(i64, Vec<Value>)>, RenderError> {
    let desired: Vec<plan::Desired> = items
        .iter()
        .map(|m| plan::Desired {
            manifest: m.clone(),
            tombstone: false,
        })
        .collect();
    let prepared = plan::prepare(&desired, &plan::CompositionInfo::default())?;
    let by_key: BTreeMap<_, _> = prepared
        .resources
        .iter()
        .map(|r| (r.key.clone(), r))
        .collect();
    let mut groups: Vec<(i64, Vec<Value>)> = Vec::new();
    for key in &prepared.ordering.order {
        let r = by_key[key];
        let g = r.settings.readiness_group;
        match groups.last_mut() {
            Some((last, items)) if *last == g => items.push(r.manifest.clone()),
            _ => groups.push((g, vec![r.manifest.clone()])),
        }
    }
    Ok(groups)
}

/// Multi-document YAML with a comment per readiness group.
fn yaml(module: &str, out: &synthesis::Synthesized, groups: &[(i64, Vec<Value>)]) -> String {
    let mut text = format!(
        "# module {module}\n# input {}\n# output {}\n",
        out.input_digest, out.output_digest
    );
    for r in &out.results {
        text.push_str(&format!("# {}: {}\n", r.severity, r.message));
    }
    for (g, items) in groups {
        text.push_str(&format!("# ---- readiness group {g} ----\n"));
        for item in items {
            text.push_str("---\n");
            text.push_str(&serde_saphyr::to_string(item).unwrap_or_default());
        }
    }
    text
}
