//! The `enoki run` process under test ([`Enoki`]): its flags, metrics, log and lifecycle; ports
//! and scratch directories.

use super::*;

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
        let bin = enoki_bin();
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

    /// Waits until enoki has finished a reconcile pass of Composition `name` (in `namespace`)
    /// that *began* after this call: the way to let the controller have its chance before
    /// asserting that something did **not** happen (a slow machine cannot turn such a check
    /// into a false pass). enoki reconciles on changes, not on a clock, so the harness makes
    /// one: it sets a test annotation on the Composition (which enoki ignores but which
    /// triggers a reconcile) twice, each time waiting for the Composition's finished-pass
    /// counter (`enoki_composition_reconciles_total{namespace,name}`) to move. The second pass
    /// to finish began after the first annotation, i.e. after everything the test did before.
    ///
    /// # Panics
    /// When no pass of the Composition finishes within 2 minutes of an annotation.
    pub async fn wait_pass_of(&self, client: &kube::Client, namespace: &str, name: &str) {
        let comps: Api<crds::Composition> = Api::namespaced(client.clone(), namespace);
        let count = || self.composition_passes(namespace, name);
        for round in 0..2 {
            let before = count();
            let nudge = serde_json::json!({"metadata": {"annotations": {
                "test.enoki.dev/nudge": format!("{:08x}", rand::random::<u32>())}}});
            comps
                .patch(name, &PatchParams::default(), &Patch::Merge(&nudge))
                .await
                .unwrap_or_else(|e| panic!("annotating Composition {namespace}/{name}: {e}"));
            eventually(
                &format!("a reconcile pass of {namespace}/{name} (round {round})"),
                Duration::from_secs(120),
                || async { (count() > before).then_some(()) },
            )
            .await;
        }
    }

    /// The whole /metrics text (empty while it does not answer).
    ///
    /// # Panics
    /// When the process was started without a metrics port.
    pub fn metrics_text(&self) -> String {
        let port = self.metrics_port.expect("started without --metrics-addr");
        let (code, body) = http_get(port, "/metrics");
        if code == 200 { body } else { String::new() }
    }

    /// The sum of metric `name`'s series that carry every label of `labels` (0 while
    /// /metrics does not answer or no series matches).
    pub fn metric_labelled(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        self.metrics_text()
            .lines()
            .filter_map(|l| {
                let series = l.strip_prefix(name)?.strip_prefix('{')?;
                let (labels, value) = series.split_once('}')?;
                let have: Vec<&str> = labels.split(',').collect();
                wanted
                    .iter()
                    .all(|w| have.contains(&w.as_str()))
                    .then(|| value.trim().parse::<f64>().ok())?
            })
            .sum()
    }

    /// Finished reconcile passes of one Composition (0 before the first, or while /metrics
    /// does not answer).
    pub fn composition_passes(&self, namespace: &str, name: &str) -> f64 {
        self.metric_labelled(
            "enoki_composition_reconciles_total",
            &[("namespace", namespace), ("name", name)],
        )
    }

    /// [`Enoki::wait_pass_of`] for a Composition in the test's namespace.
    pub async fn wait_pass(&self, env: &TestEnv, name: &str) {
        self.wait_pass_of(&env.client, &env.namespace, name).await;
    }

    /// Waits until the process has finished at least `n` Composition reconcile passes since it
    /// started (after a restart: the new process has looked at everything once).
    ///
    /// # Panics
    /// When that does not happen within 2 minutes.
    pub async fn wait_passes_since_start(&self, n: u32) {
        let count = || self.metric("enoki_reconcile_duration_seconds_count");
        eventually(
            &format!("{n} reconcile passes since the start"),
            Duration::from_secs(120),
            || async { count().is_some_and(|c| c >= f64::from(n)).then_some(()) },
        )
        .await;
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

/// The enoki binary the tests run: `ENOKI_BIN` (benchmarks name the release build), else the
/// debug build.
///
/// # Panics
/// When it is missing.
pub fn enoki_bin() -> PathBuf {
    let bin = std::env::var_os("ENOKI_BIN").map_or_else(
        || workspace_root().join("target/debug/enoki"),
        PathBuf::from,
    );
    assert!(
        bin.exists(),
        "{} is missing: build it first (`cargo build -p reconciler-controller`; `make test` does)",
        bin.display()
    );
    bin
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

/// A process killed when dropped (a registry, a server), with the directory it served from,
/// removed after it.
pub struct Proc(pub std::process::Child, pub Option<TempDir>);

impl Proc {
    /// A process that owns no directory.
    pub fn new(child: std::process::Child) -> Self {
        Self(child, None)
    }

    /// A process whose directory goes with it.
    pub fn owning(child: std::process::Child, dir: TempDir) -> Self {
        Self(child, Some(dir))
    }
}

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

/// A fresh directory under the temp dir, removed with everything in it when dropped (a
/// test that panics removes it too).
pub struct TempDir(tempfile::TempDir);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;

    fn deref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl AsRef<std::ffi::OsStr> for TempDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.path().as_os_str()
    }
}

/// A fresh [`TempDir`] named `enoki-NAME-…`.
///
/// # Panics
/// When it cannot be created.
pub fn tempdir(name: &str) -> TempDir {
    TempDir(
        tempfile::Builder::new()
            .prefix(&format!("enoki-{name}-"))
            .tempdir()
            .expect("temp dir"),
    )
}

/// Runs `target/debug/enoki ARGS` from the workspace root against the test control plane
/// (`KUBECONFIG` set, no remote kubeconfig inherited).
///
/// # Panics
/// When the binary is missing (`make test` builds it) or cannot run.
pub fn enoki_cli(args: &[&str]) -> std::process::Output {
    let bin = workspace_root().join("target/debug/enoki");
    assert!(
        bin.exists(),
        "{} is missing (make test builds it)",
        bin.display()
    );
    std::process::Command::new(bin)
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .env_remove("ENOKI_REMOTE_KUBECONFIG")
        .current_dir(workspace_root())
        .output()
        .expect("the enoki binary runs")
}

/// [`enoki_cli`]'s exit code and its stdout followed by its stderr.
pub fn enoki_cli_text(args: &[&str]) -> (i32, String) {
    let out = enoki_cli(args);
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A `/proc/<pid>/status` field given in kB (`VmRSS:`, `VmHWM:`, `RssAnon:`), in MiB; 0 when
/// the process or the field is gone.
pub fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Anonymous RSS of `pid` in MiB (the heap and stacks; without the binary's mapped code).
pub fn anon_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "RssAnon:")
}
