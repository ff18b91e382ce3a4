//! Processes of the benchmark: CPU seconds and memory from `/proc`, the control plane's
//! pids, and `perf record` of enoki (`BENCH_PERF`).

use super::*;

pub(crate) const CLK_TCK: f64 = 100.0;

pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (t(11) + t(12)) / CLK_TCK
}

/// CPU seconds used so far by the processes named `names` (`/proc/*/comm`): the local control
/// plane's kube-apiserver and etcd.
pub(crate) fn cpu_seconds_named(names: &[&str]) -> f64 {
    pids_named(names).into_iter().map(cpu_seconds).sum()
}

/// Whether a process named one of `names` runs.
pub(crate) fn any_process_named(names: &[&str]) -> bool {
    !pids_named(names).is_empty()
}

/// The processes named one of `names` (`/proc/*/comm`, 15 characters of a name at most).
pub(crate) fn pids_named(names: &[&str]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            names.contains(&comm.trim())
        })
        .collect()
}

/// (current RSS, peak RSS) in MiB.
pub(crate) fn rss_mib(pid: u32) -> (f64, f64) {
    (status_mib(pid, "VmRSS:"), status_mib(pid, "VmHWM:"))
}

/// The pids of the control plane's API server and etcd (`$TESTENV_DIR/*.pid`).
pub(crate) fn server_pids() -> (u32, u32) {
    let dir = std::env::var("TESTENV_DIR").expect("TESTENV_DIR (make bench sets it)");
    let pid = |name: &str| {
        std::fs::read_to_string(format!("{dir}/{name}.pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("{dir}/{name}.pid"))
    };
    (pid("apiserver"), pid("etcd"))
}

/// CPU seconds of (this process or enoki, the API server, etcd) now.
pub(crate) fn cpu_now(client: u32) -> [f64; 3] {
    let (apiserver, etcd) = server_pids();
    [
        cpu_seconds(client),
        cpu_seconds(apiserver),
        cpu_seconds(etcd),
    ]
}

/// Microseconds of CPU per write of each process between two `cpu_now` readings.
pub(crate) fn per_write_us(before: [f64; 3], after: [f64; 3], writes: usize) -> [f64; 3] {
    let mut out = [0.0; 3];
    for i in 0..3 {
        out[i] = (after[i] - before[i]) / writes as f64 * 1e6;
    }
    out
}

/// `perf record` of process `pid` (its own threads; DWARF call graphs, so `perf report -G`
/// shows callers), when `BENCH_PERF` is set; stopped and summarised by [`perf_report`].
pub(crate) fn perf_start(
    pid: u32,
    name: &str,
) -> Option<(std::process::Child, std::path::PathBuf)> {
    std::env::var_os("BENCH_PERF")?;
    let out = harness::workspace_root().join(format!("target/bench-perf-{name}.data"));
    let child = std::process::Command::new("perf")
        .args([
            "record",
            "--no-inherit",
            "--call-graph",
            "dwarf,16384",
            "-F",
            "999",
            "-p",
            &pid.to_string(),
            "-o",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("perf (BENCH_PERF is set)");
    std::thread::sleep(Duration::from_millis(300));
    Some((child, out))
}

/// Stops `perf record` and prints enoki's CPU by shared object and its top symbols.
pub(crate) fn perf_report(perf: Option<(std::process::Child, std::path::PathBuf)>, during: &str) {
    let Some((mut child, out)) = perf else {
        return;
    };
    let _ = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    for sort in ["dso", "symbol"] {
        let report = std::process::Command::new("perf")
            .args(["report", "--stdio", "--no-children", "--sort", sort, "-i"])
            .arg(&out)
            .output()
            .expect("perf report");
        let text = String::from_utf8_lossy(&report.stdout);
        println!(
            "
`perf report --sort {sort}` of enoki during {during} (top 25):
"
        );
        println!("```");
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .take(25)
        {
            println!("{}", line.chars().take(140).collect::<String>());
        }
        println!("```");
    }
}
