//! The test control plane: kubeconfigs, clients, a fresh namespace per test ([`TestEnv`]), the
//! CRDs, a private control plane for outage tests and a TCP proxy that partitions enoki from it.

use super::*;

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

/// Deletes the test's namespace (in the background: the test does not wait for it), unless
/// `ENOKI_TEST_KEEP_NAMESPACES` is set (to look at what a failed test left).
impl Drop for TestEnv {
    fn drop(&mut self) {
        if std::env::var_os("ENOKI_TEST_KEEP_NAMESPACES").is_some() {
            return;
        }
        let namespace = self.namespace.clone();
        // The test's runtime may be the one being dropped: a fresh one on its own thread.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let kubeconfig = Kubeconfig::read_from(kubeconfig_path()).ok()?;
                let config =
                    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                        .await
                        .ok()?;
                let client = Client::try_from(config).ok()?;
                // enoki is stopped by now: its finalizers on the test's Compositions would
                // keep the namespace Terminating for good (and keep the namespace controller
                // busy retrying it for every later test).
                release_finalizers::<crds::Composition>(&client, &namespace).await;
                release_finalizers::<crds::Symphony>(&client, &namespace).await;
                Api::<Namespace>::all(client)
                    .delete(&namespace, &kube::api::DeleteParams::background())
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Removes the finalizers of every `K` in `namespace` (best effort).
async fn release_finalizers<K>(client: &Client, namespace: &str)
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug,
    <K as kube::Resource>::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let Ok(list) = api.list(&kube::api::ListParams::default()).await else {
        return;
    };
    let release = serde_json::json!({"metadata": {"finalizers": null}});
    for item in list {
        if item
            .meta()
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty())
            && let Some(name) = item.meta().name.clone()
        {
            let _ = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                .await;
        }
    }
}
