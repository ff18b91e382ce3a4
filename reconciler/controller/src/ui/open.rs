//! Opening `enoki ui`'s page in the user's browser without putting the token on a command
//! line (other local users can read every process's arguments): a page that redirects to the
//! address is written to a file only the user can read (`$XDG_RUNTIME_DIR`, else a private
//! directory under the temporary one), and the browser is started on that file — as Jupyter
//! does. The browser is `$BROWSER` (a `:`-separated list; `%s` stands for the file), `open`
//! on macOS, `xdg-open` under a graphical session; without one the printed address is the way
//! in.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The redirect page for `url` (removed by [`Launcher::drop`]).
pub struct Launcher {
    path: PathBuf,
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the redirect page for `url` on `port` and starts a browser on it; None when there is
/// no browser to start (or the file cannot be written: the address is printed anyway).
pub fn open_browser(url: &str, port: u16) -> Option<Launcher> {
    let browsers = browsers();
    if browsers.is_empty() {
        return None;
    }
    let launcher = write_page(url, port).ok()?;
    let file = format!("file://{}", launcher.path.display());
    for browser in browsers {
        let mut words: Vec<String> = browser.split_whitespace().map(str::to_string).collect();
        if words.is_empty() {
            continue;
        }
        if !words.iter().any(|w| w.contains("%s")) {
            words.push("%s".into());
        }
        let words: Vec<String> = words.iter().map(|w| w.replace("%s", &file)).collect();
        let started = std::process::Command::new(&words[0])
            .args(&words[1..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if started.is_ok() {
            break;
        }
    }
    Some(launcher)
}

/// The browsers to try, in order.
fn browsers() -> Vec<String> {
    match std::env::var("BROWSER") {
        Ok(list) if !list.trim().is_empty() => list.split(':').map(str::to_string).collect(),
        _ if cfg!(target_os = "macos") => vec!["open".into()],
        _ if std::env::var_os("DISPLAY").is_some()
            || std::env::var_os("WAYLAND_DISPLAY").is_some() =>
        {
            vec!["xdg-open".into()]
        }
        _ => Vec::new(),
    }
}

/// The page, mode 0600, in a directory only the user can enter.
fn write_page(url: &str, port: u16) -> std::io::Result<Launcher> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_dir() => PathBuf::from(d),
        _ => {
            use std::os::unix::fs::MetadataExt as _;
            let uid = uid();
            let dir = std::env::temp_dir().join(format!("enoki-ui-{uid}"));
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
            // Someone else's directory (made first, to read the page) is not used.
            let meta = std::fs::symlink_metadata(&dir)?;
            if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
                return Err(std::io::Error::other(
                    "the private directory is not private",
                ));
            }
            dir
        }
    };
    let path = dir.join(format!("enoki-ui-{port}.html"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)?;
    writeln!(
        f,
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>enoki ui</title><p><a href=\"{url}\">Open enoki ui</a></p>"
    )?;
    Ok(Launcher { path })
}

/// This process's user id (the owner of `/proc/self`).
fn uid() -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata("/proc/self").map_or(0, |m| m.uid())
}
