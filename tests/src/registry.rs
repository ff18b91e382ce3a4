//! A real OCI registry process and module pushes to it.

use super::*;

/// Starts Debian's docker-registry (a real OCI registry) on a free port with storage in a temp
/// dir; (the process, `127.0.0.1:<port>`).
///
/// # Panics
/// When docker-registry is not installed (`hack/setup.sh` installs it) or does not start.
pub fn start_registry() -> (Proc, String) {
    start_registry_with(None)
}

/// Like [`start_registry`], with HTTP Basic authentication (`auth: htpasswd`): every request
/// needs `user`:`password`.
///
/// # Panics
/// As [`start_registry`].
pub fn start_registry_with_auth(user: &str, password: &str) -> (Proc, String) {
    start_registry_with(Some((user, password)))
}

fn start_registry_with(auth: Option<(&str, &str)>) -> (Proc, String) {
    let bin = std::path::Path::new("/usr/bin/docker-registry");
    assert!(
        bin.exists(),
        "docker-registry is not installed (hack/setup.sh installs the Debian package)"
    );
    let dir = tempdir("registry");
    let port = free_port();
    let config = dir.join("config.yml");
    let mut text = format!(
        "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n",
        dir.join("data").display()
    );
    if let Some((user, password)) = auth {
        let hash = bcrypt::hash(password, 4).expect("bcrypt");
        let htpasswd = dir.join("htpasswd");
        std::fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("htpasswd");
        text.push_str(&format!(
            "auth: {{htpasswd: {{realm: enoki-test, path: {}}}}}\n",
            htpasswd.display()
        ));
    }
    std::fs::write(&config, text).expect("registry config");
    let child = std::process::Command::new(bin)
        .args(["serve", &config.to_string_lossy()])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("registry.log")).expect("registry log"))
        .spawn()
        .expect("docker-registry starts");
    wait_port(port);
    (Proc::owning(child, dir), format!("127.0.0.1:{port}"))
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
