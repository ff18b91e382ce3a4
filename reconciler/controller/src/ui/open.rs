//! Opening `enoki ui`'s page in the user's browser without putting the token on a command
//! line (other local users can read every process's arguments): a page that redirects to the
//! address is written to a new file with a random name, mode 0600, in a directory only the
//! user can enter (`$XDG_RUNTIME_DIR`, else a private directory under the temporary one; a
//! directory someone else owns or can read is not used), and the browser is started on that
//! file — as Jupyter does. The browser is `$BROWSER` (a `:`-separated list; `%s` stands for
//! the file), `open` on macOS, `xdg-open` under a graphical session; without one, or when the
//! file cannot be written, the printed address is the way in.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

/// The redirect page (removed when dropped).
pub struct Launcher {
    path: PathBuf,
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes the redirect page for `url` and starts a browser on it; None when there is no
/// browser to start or the page cannot be written (then it says so on stderr).
pub fn open_browser(url: &str) -> Option<Launcher> {
    let browsers = browsers();
    if browsers.is_empty() {
        return None;
    }
    let launcher = match write_page(url) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("Not opening a browser ({e}): open the address above.");
            return None;
        }
    };
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
        if let Ok(mut child) = started {
            // Reaped when it ends (xdg-open returns at once).
            std::thread::spawn(move || child.wait());
            eprintln!(
                "Opened a browser; if it shows a file error (a sandboxed browser cannot read \
                 {}), open the address above.",
                launcher.path.display()
            );
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

/// The page, in a new file of a random name (never an existing file or a link).
fn write_page(url: &str) -> std::io::Result<Launcher> {
    let name = super::auth::token().map_err(std::io::Error::other)?;
    let path = private_dir()?.join(format!("enoki-ui-{}.html", &name[..16]));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    writeln!(
        f,
        "<!doctype html><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"0;url={url}\">\
         <title>enoki ui</title><p><a href=\"{url}\">Open enoki ui</a></p>"
    )?;
    Ok(Launcher { path })
}

/// `$XDG_RUNTIME_DIR`, else `<tmp>/enoki-ui-<uid>` (made 0700) — each only when the user
/// owns it and no one else may enter it.
fn private_dir() -> std::io::Result<PathBuf> {
    let uid = euid();
    let private = |dir: &Path| {
        std::fs::symlink_metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    };
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && private(&d)
    {
        return Ok(d);
    }
    let dir = std::env::temp_dir().join(format!("enoki-ui-{uid}"));
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    if private(&dir) {
        Ok(dir)
    } else {
        Err(std::io::Error::other(format!(
            "{} is not a private directory",
            dir.display()
        )))
    }
}

/// This process's effective user id.
#[allow(unsafe_code)]
fn euid() -> u32 {
    // SAFETY: geteuid takes no argument and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_new_private_and_redirects() {
        let launcher = write_page("http://127.0.0.1:1/?token=t").unwrap();
        let meta = std::fs::metadata(&launcher.path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(meta.uid(), euid());
        let text = std::fs::read_to_string(&launcher.path).unwrap();
        assert!(text.contains("url=http://127.0.0.1:1/?token=t"), "{text}");
        let path = launcher.path.clone();
        drop(launcher);
        assert!(!path.exists(), "removed when dropped");
        assert!(private_dir().is_ok());
    }
}
