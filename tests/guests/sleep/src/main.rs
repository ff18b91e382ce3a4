//! Hostile test guest, built for WASI preview1 and preview2: `std::thread::sleep` for
//! `SLEEP_MS` milliseconds (default an hour) — a blocking `poll_oneoff` /
//! `wasi:clocks/monotonic-clock` wait, not a busy loop — then an empty ResourceList.

use std::io::Write;

fn main() {
    let ms: u64 = std::env::var("SLEEP_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_600_000);
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let mut out = std::io::stdout();
    let _ = out
        .write_all(br#"{"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[]}"#);
    let _ = out.flush();
}
