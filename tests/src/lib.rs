//! The test harness: every cluster behaviour of enoki is proved against a real kube-apiserver
//! (plus etcd and kube-controller-manager) that `hack/testenv.sh` starts on 127.0.0.1.
//!
//! [`TestEnv::new`] gives each test a [`kube::Client`] and a fresh namespace `t-<random>`.
//! It **panics** — never skips — when the control plane is not there: a green run that
//! tested nothing would be a lie. The kubeconfig comes from `KUBECONFIG`, or from
//! `target/testenv/kubeconfig` (where `hack/testenv.sh up` writes it). [`invariants`] checks
//! a converged Composition from the API alone; chaos tests and e2e suites end with it.

pub mod invariants;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config};

/// Field manager the harness itself uses for set-up writes (never `enoki`).
pub const HARNESS_MANAGER: &str = "enoki-test-harness";
/// Label put on every namespace the harness creates.
pub const TEST_NAMESPACE_LABEL: &str = "enoki.dev/test";

/// A client connected to the test control plane and a namespace of this test's own.
pub struct TestEnv {
    /// Client authenticated as the control plane's admin.
    pub client: Client,
    /// A fresh namespace, `t-<random>`, created for this test.
    pub namespace: String,
}

/// Where the kubeconfig of the test control plane is.
///
/// # Panics
/// When neither `KUBECONFIG` nor `target/testenv/kubeconfig` exists.
pub fn kubeconfig_path() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECONFIG") {
        return PathBuf::from(path);
    }
    let default = workspace_root().join("target/testenv/kubeconfig");
    assert!(
        default.exists(),
        "no test control plane: KUBECONFIG is unset and {} does not exist. \
         Start one with `make test` (or `hack/testenv.sh up`); cluster tests never skip.",
        default.display()
    );
    default
}

/// Where the kubeconfig of the second ("remote") control plane is: `TESTENV_REMOTE_KUBECONFIG`,
/// else `target/testenv-remote/kubeconfig` (`make test` starts it, without
/// kube-controller-manager, for the `--remote-kubeconfig` e2e).
///
/// # Panics
/// When it does not exist: remote tests never skip.
pub fn remote_kubeconfig_path() -> PathBuf {
    let path = std::env::var_os("TESTENV_REMOTE_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/testenv-remote/kubeconfig"));
    assert!(
        path.exists(),
        "no remote control plane: {} does not exist. `make test` starts one \
         (TESTENV_DIR=target/testenv-remote TESTENV_KCM=0 hack/testenv.sh up).",
        path.display()
    );
    path
}

/// A client for the remote control plane ([`remote_kubeconfig_path`]).
///
/// # Panics
/// When its kubeconfig is missing or unusable.
pub async fn remote_client() -> Client {
    let path = remote_kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("remote kubeconfig is usable");
    Client::try_from(config).expect("remote client")
}

/// A control plane of one test's own (etcd + kube-apiserver with enoki's CRDs, no
/// kube-controller-manager), for tests that stop and restart its parts; stopped and removed
/// when dropped. Needs the binaries (`K8S_TESTBIN`, or `target/.k8s-testbin-dir`) and the
/// rendered CRDs (`TESTENV_CRDS`, or `target/crds.yaml`): `make test` provides both.
pub struct OwnControlPlane {
    /// Its state directory (`hack/testenv.sh`'s `TESTENV_DIR`).
    pub dir: PathBuf,
    /// Its kubeconfig.
    pub kubeconfig: PathBuf,
}

impl OwnControlPlane {
    /// Starts one.
    ///
    /// # Panics
    /// When the binaries or CRDs are missing or it does not start.
    pub fn start() -> OwnControlPlane {
        let root = workspace_root();
        let dir = root.join(format!("target/testenv-own-{:08x}", rand::random::<u32>()));
        let testbin = std::env::var("K8S_TESTBIN").unwrap_or_else(|_| {
            std::fs::read_to_string(root.join("target/.k8s-testbin-dir"))
                .map(|s| s.trim().to_string())
                .expect("K8S_TESTBIN is unset and target/.k8s-testbin-dir is missing (make test)")
        });
        let crds = std::env::var("TESTENV_CRDS")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target/crds.yaml"));
        assert!(
            crds.exists(),
            "{} is missing (make test renders it)",
            crds.display()
        );
        let cp = OwnControlPlane {
            kubeconfig: dir.join("kubeconfig"),
            dir,
        };
        let ok = std::process::Command::new("bash")
            .arg(root.join("hack/testenv.sh"))
            .arg("up")
            .env("TESTENV_DIR", &cp.dir)
            .env("TESTENV_KCM", "0")
            .env("TESTENV_CRDS", &crds)
            .env("K8S_TESTBIN", testbin)
            .status()
            .expect("hack/testenv.sh runs")
            .success();
        assert!(ok, "hack/testenv.sh up failed for {}", cp.dir.display());
        cp
    }

    /// Runs `hack/testenv.sh <cmd>` on it (`stop-apiserver`, `start-etcd`, …).
    ///
    /// # Panics
    /// When the command fails.
    pub fn run(&self, cmd: &str) {
        let ok = std::process::Command::new("bash")
            .arg(workspace_root().join("hack/testenv.sh"))
            .arg(cmd)
            .env("TESTENV_DIR", &self.dir)
            .status()
            .expect("hack/testenv.sh runs")
            .success();
        assert!(ok, "hack/testenv.sh {cmd} failed");
    }

    /// A client for it (admin).
    ///
    /// # Panics
    /// When its kubeconfig is unusable.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("its kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a usable kubeconfig");
        Client::try_from(config).expect("a client")
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(workspace_root().join("hack/testenv.sh"))
            .arg("down")
            .env("TESTENV_DIR", &self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A TCP proxy on 127.0.0.1 in front of the test API server that can cut every connection
/// (a network partition between one client and the API server) and heal again.
pub struct Partition {
    /// The proxy's port.
    pub port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    accept: tokio::task::AbortHandle,
}

impl Partition {
    /// Starts a proxy to `127.0.0.1:<upstream>`.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start(upstream: u16) -> Partition {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a proxy port");
        let port = listener.local_addr().expect("its address").port();
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, l) = (cut.clone(), conns.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                if c.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut up) =
                        tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                if let Ok(mut v) = l.lock() {
                    v.push(task.abort_handle());
                }
            }
        })
        .abort_handle();
        Partition {
            port,
            cut,
            conns,
            accept,
        }
    }

    /// Cuts every open connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut v) = self.conns.lock() {
            for c in v.drain(..) {
                c.abort();
            }
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// A copy of the test kubeconfig whose server is this proxy, written to `path`.
    ///
    /// # Panics
    /// When the kubeconfig cannot be read or written.
    pub fn kubeconfig(&self, path: &std::path::Path) {
        let text = std::fs::read_to_string(kubeconfig_path()).expect("the test kubeconfig");
        let proxied: String = text
            .lines()
            .map(
                |l| match l.trim_start().strip_prefix("server: https://127.0.0.1:") {
                    Some(_) => format!("    server: https://127.0.0.1:{}", self.port),
                    None => l.to_string(),
                },
            )
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(path, proxied).expect("writing the proxied kubeconfig");
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// The port of the test API server (from the kubeconfig).
///
/// # Panics
/// When the kubeconfig has no `server: https://127.0.0.1:<port>` line.
pub fn api_server_port() -> u16 {
    let text = std::fs::read_to_string(kubeconfig_path()).expect("the test kubeconfig");
    text.lines()
        .find_map(|l| {
            l.trim_start()
                .strip_prefix("server: https://127.0.0.1:")?
                .trim()
                .parse()
                .ok()
        })
        .expect("a local API server in the kubeconfig")
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// A client for the test control plane as one of the kubeconfig's other contexts: `tenant-a`
/// and `tenant-b` are token users with no rights of their own (`hack/testenv.sh`).
///
/// # Panics
/// When the kubeconfig is missing or has no such context.
pub async fn client_as(context: &str) -> Client {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let options = KubeConfigOptions {
        context: Some(context.to_string()),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "context {context} in {}: {e} (restart the control plane: `hack/testenv.sh up`)",
                path.display()
            )
        });
    Client::try_from(config).expect("a client can be built from the kubeconfig")
}

/// Runs `kubectl` (the Go-built one `make test` puts on PATH) against the test control plane
/// as its admin; (success, stdout + stderr).
///
/// # Panics
/// When kubectl cannot be started.
pub fn kubectl(args: &[&str], stdin: Option<&[u8]>) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl is on PATH (make test puts the Go-built one there)");
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input).expect("kubectl reads stdin");
    }
    let out = child.wait_with_output().expect("kubectl runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The ServiceAccount the shipped manifests run enoki as.
pub const CONTROLLER_SA: &str = "system:serviceaccount:enoki-system:enoki";

/// Whether `user` may `verb` `resource` (in `namespace`, or in all namespaces).
pub fn can_i(user: &str, verb: &str, resource: &str, namespace: Option<&str>) -> bool {
    let mut args = vec!["auth", "can-i", verb, resource, "--as", user];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    } else {
        args.push("--all-namespaces");
    }
    kubectl(&args, None).1.trim().starts_with("yes")
}

/// Applies a kustomization (`deploy/base`, `deploy/overlays/single-tenant`) with server-side
/// apply; returns the rendered YAML.
///
/// # Panics
/// When kustomize or the API server refuses.
pub fn apply_kustomization(dir: &str) -> String {
    let path = workspace_root().join(dir);
    let (ok, yaml) = kubectl(&["kustomize", &path.to_string_lossy()], None);
    assert!(ok, "{yaml}");
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=deploy-test",
            "-f",
            "-",
        ],
        Some(yaml.as_bytes()),
    );
    assert!(ok, "{out}");
    yaml
}

/// Installs the default install, `deploy/base` (kustomize, server-side apply), and removes the
/// single-tenant overlay's write grants a previous test may have left (`kubectl apply` does
/// not prune); returns once the controller's ServiceAccount has lost them. Returns the
/// rendered base.
///
/// # Panics
/// When kustomize or the API server refuses, or the grants outlive a minute.
pub fn install_default_install() -> String {
    let yaml = apply_kustomization("deploy/base");
    for (kind, name) in [
        ("clusterrolebinding", "enoki-managed-resources"),
        ("clusterrole", "enoki-managed-resources"),
        ("clusterrole", "enoki-sample-kinds"),
        ("clusterrole", "enoki-builtins"),
        ("clusterrolebinding", "enoki-multi-tenant"),
        ("clusterrole", "enoki-multi-tenant"),
    ] {
        let (ok, out) = kubectl(&["delete", kind, name, "--ignore-not-found"], None);
        assert!(ok, "{out}");
    }
    let start = std::time::Instant::now();
    while can_i(CONTROLLER_SA, "patch", "configmaps", None) {
        assert!(start.elapsed().as_secs() < 60, "write grants survived");
        std::thread::sleep(Duration::from_millis(500));
    }
    yaml
}

/// Onboards namespace `ns` as `deploy/onboarding/tenant.yaml` says: its `enoki-composer`
/// ServiceAccount, bound to `edit`, and the controller's right to impersonate it there.
///
/// # Panics
/// When the template cannot be read or the API server refuses.
pub fn onboard_namespace(ns: &str) {
    let template = workspace_root().join("deploy/onboarding/tenant.yaml");
    let text = std::fs::read_to_string(&template)
        .unwrap_or_else(|e| panic!("{}: {e}", template.display()))
        .replace("TENANT", ns);
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=platform",
            "-f",
            "-",
        ],
        Some(text.as_bytes()),
    );
    assert!(ok, "onboarding {ns}: {out}");
}

/// Gives the harness's `tenant-a` user Kubernetes' `edit` role in `namespace`, with enoki's
/// kinds aggregated into it as the shipped manifests aggregate them
/// (`deploy/base/rbac-tenants.yaml`): what a tenant of a real install holds.
///
/// # Panics
/// When kubectl or the API server refuses.
pub fn grant_tenant_edit(namespace: &str) {
    let roles = workspace_root().join("deploy/base/rbac-tenants.yaml");
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=harness",
            "-f",
            &roles.to_string_lossy(),
        ],
        None,
    );
    assert!(ok, "{out}");
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: tenant-a-edit, namespace: {namespace}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}\nsubjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: tenant-a}}]\n"
    );
    let (ok, out) = kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=harness",
            "-f",
            "-",
        ],
        Some(binding.as_bytes()),
    );
    assert!(ok, "{out}");
    let start = std::time::Instant::now();
    while !can_i(
        "tenant-a",
        "create",
        "compositions.enoki.dev",
        Some(namespace),
    ) {
        assert!(
            start.elapsed().as_secs() < 60,
            "tenant-a never got edit on Compositions"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A client for the test control plane.
///
/// # Panics
/// When the kubeconfig is missing or unreadable, or the API server does not answer.
pub async fn client() -> Client {
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", path.display()));
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", path.display()));
    let client = Client::try_from(config).expect("a client can be built from the kubeconfig");
    client.apiserver_version().await.unwrap_or_else(|e| {
        panic!(
            "the test control plane at {} does not answer: {e}. Is it running (`make test`)?",
            path.display()
        )
    });
    client
}

impl TestEnv {
    /// Connects to the control plane and creates a fresh namespace for this test.
    ///
    /// # Panics
    /// When the control plane is not there or the namespace cannot be created.
    pub async fn new() -> Self {
        let client = client().await;
        let namespace = format!("t-{:08x}", rand::random::<u32>());
        create_namespace(&client, &namespace).await;
        TestEnv { client, namespace }
    }

    /// An `Api` for a namespaced kind in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// Creates a namespace labelled as a test namespace.
///
/// # Panics
/// When the API server refuses.
pub async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some([(TEST_NAMESPACE_LABEL.to_string(), "true".to_string())].into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
}

/// Server-side applies every enoki CRD and waits until each is Established.
///
/// Idempotent, so every test that needs the CRDs may call it.
///
/// # Panics
/// When a CRD is refused or does not become Established within a minute.
pub async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let builtin = crds::manifests::builtins().expect("built-in CRDs parse");
    for crd in crds::manifests::all().into_iter().chain(builtin) {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        crds.patch(
            &name,
            &PatchParams::apply(HARNESS_MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("CRD {name} was refused: {e}"));
        tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .unwrap_or_else(|_| panic!("CRD {name} not Established after 60s"))
        .unwrap_or_else(|e| panic!("watching CRD {name} failed: {e}"));
    }
}

/// Polls `check` every 250 ms until it returns `Some`, or panics after `timeout` naming `what`.
///
/// # Panics
/// When `check` has not succeeded within `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A running `enoki run` process scoped to one namespace; killed when dropped.
pub struct Enoki {
    child: std::process::Child,
    /// Where its logs go.
    pub log: PathBuf,
    /// The port of its /metrics, /healthz and /readyz (when the harness chose it).
    pub metrics_port: Option<u16>,
}

impl Enoki {
    /// Starts `target/debug/enoki run --namespace <ns>` against the test control plane.
    ///
    /// # Panics
    /// When the binary is missing (build the workspace first) or cannot start.
    pub fn start(namespace: &str) -> Enoki {
        Enoki::start_with(namespace, &[])
    }

    /// Like [`Enoki::start`], with extra flags.
    ///
    /// # Panics
    /// When the binary is missing or cannot start.
    pub fn start_with(namespace: &str, extra: &[&str]) -> Enoki {
        Enoki::start_as(namespace, extra, &kubeconfig_path(), &[])
    }

    /// Like [`Enoki::start_with`], connecting with `kubeconfig` (e.g. a ServiceAccount token's)
    /// and with extra environment variables.
    ///
    /// # Panics
    /// When the binary is missing or cannot start.
    pub fn start_as(
        namespace: &str,
        extra: &[&str],
        kubeconfig: &std::path::Path,
        env: &[(&str, &str)],
    ) -> Enoki {
        // Benchmarks run the release build: ENOKI_BIN names it.
        let bin = std::env::var("ENOKI_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|_| workspace_root().join("target/debug/enoki"));
        assert!(
            bin.exists(),
            "{} is missing: build it first (`cargo build -p reconciler-controller`; `make test` does)",
            bin.display()
        );
        let log = std::env::temp_dir().join(format!(
            "enoki-{namespace}-{:08x}.log",
            rand::random::<u32>()
        ));
        let file = std::fs::File::create(&log).expect("log file can be created");
        // An empty namespace runs cluster-wide (Synthesizer status); scope it with a selector.
        let mut args = vec!["run"];
        if !extra.contains(&"--readiness-poll") {
            args.extend(["--readiness-poll", "1s"]);
        }
        // Eno's default (1m) would make every Synthesizer-change test wait a minute.
        if !extra.contains(&"--rollout-cooldown") {
            args.extend(["--rollout-cooldown", "2s"]);
        }
        if !namespace.is_empty() {
            args.extend(["--namespace", namespace]);
        }
        // The metrics port: the caller's `--metrics-addr HOST:PORT`, or one chosen here.
        let mut metrics_port = extra
            .iter()
            .position(|a| *a == "--metrics-addr")
            .and_then(|i| extra.get(i + 1))
            .and_then(|addr| addr.rsplit(':').next()?.parse().ok());
        let metrics_addr;
        if !extra.contains(&"--metrics-addr") {
            let port = free_port();
            metrics_port = Some(port);
            metrics_addr = format!("127.0.0.1:{port}");
            args.extend(["--metrics-addr", metrics_addr.as_str()]);
        }
        let child = std::process::Command::new(bin)
            .args(&args)
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file)
            .spawn()
            .expect("enoki run starts");
        Enoki {
            child,
            log,
            metrics_port,
        }
    }

    /// The value of metric `name` (summed over its label sets) from /metrics; `None` while
    /// nothing answers.
    ///
    /// # Panics
    /// When the harness did not choose the metrics port.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let port = self.metrics_port.expect("started without --metrics-addr");
        let (code, body) = http_get(port, "/metrics");
        if code != 200 {
            return None;
        }
        Some(
            body.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit; whether it did.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops the process (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The process's log so far (for assertion messages).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Enoki {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The wasm build of sample 01 (`make test` builds it first).
///
/// # Panics
/// When it has not been built.
pub fn sample_module() -> Vec<u8> {
    let p = workspace_root().join("target/wasm32-wasip1/release/hello-rust.wasm");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the samples first (hack/build-samples.sh; `make test` does)",
            p.display()
        )
    })
}

/// Stores a module in a ConfigMap (`binaryData.module.wasm`) and creates a Synthesizer named
/// after the namespace that uses it with one ref, `config` (a ConfigMap). Returns its name.
///
/// # Panics
/// When the API server refuses.
pub async fn install_synthesizer(env: &TestEnv, suffix: &str, module: &[u8]) -> String {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::ConfigMap;
    let cm_name = format!("module-{suffix}");
    let cms: Api<ConfigMap> = env.api();
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(cm_name.clone()),
            ..ObjectMeta::default()
        },
        binary_data: Some([("module.wasm".to_string(), ByteString(module.to_vec()))].into()),
        ..ConfigMap::default()
    };
    cms.patch(
        &cm_name,
        &PatchParams::apply(HARNESS_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("module ConfigMap");
    let name = format!("{}-{suffix}", env.namespace);
    let synth = serde_json::json!({
        "apiVersion": "enoki.dev/v1alpha1", "kind": "Synthesizer",
        "metadata": {"name": name},
        "spec": {
            "module": {"configMap": {"namespace": env.namespace, "name": cm_name, "key": "module.wasm"}},
            "refs": [{"key": "config", "resource": {"group": "", "version": "v1", "kind": "ConfigMap"}}],
        },
    });
    let synths: Api<crds::Synthesizer> = Api::all(env.client.clone());
    synths
        .patch(
            &name,
            &PatchParams::apply(HARNESS_MANAGER).force(),
            &Patch::Apply(&synth),
        )
        .await
        .expect("Synthesizer");
    name
}

/// A free TCP port on 127.0.0.1.
///
/// # Panics
/// When no port can be bound.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// GET `http://127.0.0.1:<port><path>` with curl: (status code, body). `(0, "")` when nothing
/// answers.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            &format!("http://127.0.0.1:{port}{path}"),
        ])
        .output();
    let Ok(out) = out else {
        return (0, String::new());
    };
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// The `echo` test synthesizer (`tests/guests/echo`): it emits the JSON list stored in the
/// bound ConfigMap's `data.items`.
///
/// # Panics
/// When it has not been built (`hack/build-samples.sh`; `make test` does).
pub fn echo_module() -> Vec<u8> {
    let p = workspace_root().join("target/wasm32-wasip1/release/echo.wasm");
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run hack/build-samples.sh (make test does)",
            p.display()
        )
    })
}

/// A ConfigMap manifest for an `echo` items list.
#[allow(clippy::needless_pass_by_value)] // called with `json!` temporaries
pub fn config_map(
    name: &str,
    annotations: serde_json::Value,
    data: serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations}, "data": data})
}

/// Writes `items` into ConfigMap `name` (`data.items`), the input of an `echo` Composition.
///
/// # Panics
/// When the API server refuses.
pub async fn set_echo_items(env: &TestEnv, name: &str, items: &serde_json::Value) {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cms: Api<ConfigMap> = env.api();
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"items": items.to_string()}});
    cms.patch(
        name,
        &PatchParams::apply(HARNESS_MANAGER).force(),
        &Patch::Apply(&cm),
    )
    .await
    .expect("items ConfigMap");
}

/// Applies a Composition `name` of `synthesizer` with its `config` ref bound to ConfigMap
/// `config`; `extra_spec` is merged into its spec (e.g. `dependsOn`).
///
/// # Panics
/// When the API server refuses.
pub async fn apply_composition(
    env: &TestEnv,
    name: &str,
    synthesizer: &str,
    config: &str,
    extra_spec: serde_json::Value,
) {
    let mut spec = serde_json::json!({"synthesizer": {"name": synthesizer},
        "bindings": [{"key": "config", "resource": {"name": config}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    let comp = serde_json::json!({"apiVersion": "enoki.dev/v1alpha1", "kind": "Composition",
        "metadata": {"name": name}, "spec": spec});
    let comps: Api<crds::Composition> = env.api();
    comps
        .patch(
            name,
            &PatchParams::apply(HARNESS_MANAGER).force(),
            &Patch::Apply(&comp),
        )
        .await
        .expect("Composition");
}

/// (status, reason, message) of condition `type_` of Composition `name`; `None` while it
/// has none (or the Composition does not exist).
///
/// # Panics
/// When the API server refuses.
pub async fn composition_condition(
    env: &TestEnv,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let comps: Api<crds::Composition> = env.api();
    comps
        .get_opt(name)
        .await
        .expect("reading a Composition")?
        .status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// Whether Composition `name` has condition `Ready=True`.
///
/// # Panics
/// When the API server refuses.
pub async fn composition_ready(env: &TestEnv, name: &str) -> bool {
    let comps: Api<crds::Composition> = env.api();
    comps
        .get_opt(name)
        .await
        .expect("reading a Composition")
        .and_then(|c| c.status)
        .is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// One request the API server's audit log recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `patch`, `update`, `delete`, …
    pub verb: String,
    /// The resource (`configmaps`), with `/status` for the subresource.
    pub resource: String,
    /// The object's name (empty for lists and watches).
    pub name: String,
    /// The client's User-Agent.
    pub user_agent: String,
    /// When the API server received it (RFC 3339, microseconds).
    pub received: String,
    /// The request URI (path and query: label selectors, watch).
    pub uri: String,
}

impl Request {
    /// Whether enoki made it (its User-Agent is `enoki/<version>`).
    pub fn by_enoki(&self) -> bool {
        self.user_agent.starts_with("enoki/")
    }

    /// Whether it changes something.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// The requests the audit log (written by `hack/testenv.sh`) recorded in `namespace` after
/// `since` (RFC 3339).
///
/// # Panics
/// When the audit log cannot be read.
pub fn audited_requests(namespace: &str, since: &str) -> Vec<Request> {
    audited(since, |e| e["objectRef"]["namespace"] == namespace)
}

/// The requests the audit log recorded after `since` with no namespace: cluster-scoped
/// objects, and lists and watches across every namespace.
///
/// # Panics
/// When the audit log cannot be read.
pub fn audited_cluster_wide(since: &str) -> Vec<Request> {
    audited(since, |e| e["objectRef"]["namespace"].is_null())
}

fn audited(since: &str, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<Request> {
    let path = std::env::var("TESTENV_AUDIT_LOG")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            kubeconfig_path()
                .parent()
                .expect("the kubeconfig has a directory")
                .join("audit.log")
        });
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (hack/testenv.sh writes it)", path.display()));
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| keep(e))
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .is_some_and(|t| t > since)
        })
        .map(|e| {
            let sub = s(&e["objectRef"]["subresource"]);
            Request {
                verb: s(&e["verb"]),
                resource: if sub.is_empty() {
                    s(&e["objectRef"]["resource"])
                } else {
                    format!("{}/{sub}", s(&e["objectRef"]["resource"]))
                },
                name: s(&e["objectRef"]["name"]),
                user_agent: s(&e["userAgent"]),
                received: s(&e["requestReceivedTimestamp"]),
                uri: s(&e["requestURI"]),
            }
        })
        .collect()
}

/// Now, as RFC 3339 (for [`audited_requests`]).
pub fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// A process killed when dropped (a registry, a server).
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something listens on 127.0.0.1:`port`.
///
/// # Panics
/// After 30 s.
pub fn wait_port(port: u16) {
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "nothing listens on 127.0.0.1:{port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fresh directory under the temp dir.
///
/// # Panics
/// When it cannot be created.
pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("enoki-{name}-{:08x}", rand::random::<u32>()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Starts Debian's docker-registry (a real OCI registry) on a free port with storage in a temp
/// dir; (the process, `127.0.0.1:<port>`).
///
/// # Panics
/// When docker-registry is not installed (`hack/setup.sh` installs it) or does not start.
pub fn start_registry() -> (Proc, String) {
    let bin = std::path::Path::new("/usr/bin/docker-registry");
    assert!(
        bin.exists(),
        "docker-registry is not installed (hack/setup.sh installs the Debian package)"
    );
    let dir = tempdir("registry");
    let port = free_port();
    let config = dir.join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
            dir.join("data").display()
        ),
    )
    .expect("registry config");
    let child = std::process::Command::new(bin)
        .args(["serve", &config.to_string_lossy()])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("registry.log")).expect("registry log"))
        .spawn()
        .expect("docker-registry starts");
    wait_port(port);
    (Proc(child), format!("127.0.0.1:{port}"))
}

/// `enoki module push FILE REFERENCE`; the pushed manifest's digest.
///
/// # Panics
/// When the push fails.
pub fn push_module(file: &std::path::Path, reference: &str) -> String {
    let out = std::process::Command::new(workspace_root().join("target/debug/enoki"))
        .args(["module", "push", &file.to_string_lossy(), reference])
        .output()
        .expect("enoki runs");
    assert!(
        out.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let digest = text.lines().next().unwrap_or_default().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{text}"
    );
    digest
}
