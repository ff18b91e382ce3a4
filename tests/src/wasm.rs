//! Hand-encoded WebAssembly modules for the attack tests: compile bombs and slow compiles
//! ([`module`]), and the processes compiling them ([`compile_children`]).

/// Appends `v` as unsigned LEB128.
fn leb(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn section(id: u8, body: &[u8], out: &mut Vec<u8>) {
    out.push(id);
    leb(body.len() as u64, out);
    out.extend_from_slice(body);
}

/// A WASI command module: `_start` returns at once, and `functions` more functions (never
/// called) each declare `locals` i64 locals and run `body` (raw instructions, `end` added).
/// A data segment of `pad` zero bytes sizes the module (from 16 MiB it starts on the
/// baseline compiler).
///
/// `module(4_000, 50_000, &[], 16 << 20)` is a Winch compile bomb: Winch zeroes each local
/// with its own store, 400 KB of code per function, gigabytes from a few kilobytes of
/// functions. `module(2, 32, &branchy_body(2_000), 0)` is a Cranelift compile bomb, and
/// [`slow_module`] a slow but modest compilation.
pub fn module(functions: u32, locals: u32, body: &[u8], pad: usize) -> Vec<u8> {
    let mut out = b"\0asm\x01\0\0\0".to_vec();
    section(1, &[1, 0x60, 0, 0], &mut out); // one type: [] -> []
    let mut funcs = Vec::new();
    leb(u64::from(functions) + 1, &mut funcs);
    funcs.extend(std::iter::repeat_n(0u8, functions as usize + 1));
    section(3, &funcs, &mut out);
    let pages = pad.div_ceil(65_536).max(1) as u64;
    let mut memory = vec![1, 0];
    leb(pages, &mut memory);
    section(5, &memory, &mut out);
    let mut exports = vec![2];
    exports.push(6);
    exports.extend_from_slice(b"_start");
    exports.extend_from_slice(&[0, 0]);
    exports.push(6);
    exports.extend_from_slice(b"memory");
    exports.extend_from_slice(&[2, 0]);
    section(7, &exports, &mut out);
    let mut code = Vec::new();
    leb(u64::from(functions) + 1, &mut code);
    code.extend_from_slice(&[2, 0, 0x0b]); // _start: no locals, end
    let mut f = Vec::new();
    if locals > 0 {
        f.push(1);
        leb(u64::from(locals), &mut f);
        f.push(0x7e);
    } else {
        f.push(0);
    }
    f.extend_from_slice(body);
    f.push(0x0b);
    for _ in 0..functions {
        leb(f.len() as u64, &mut code);
        code.extend_from_slice(&f);
    }
    section(10, &code, &mut out);
    if pad > 0 {
        let mut data = vec![1, 0, 0x41, 0, 0x0b];
        leb(pad as u64, &mut data);
        data.resize(data.len() + pad, 0);
        section(11, &data, &mut out);
    }
    out
}

/// A loop of `n` rounds of 32 `if`/`else` on 32 locals (locals: at least 32). Cranelift's
/// time and memory grow with the square of a function's size here: two functions of
/// `branchy_body(600)` (800 KB) take it about 5 s and 425 MB, of `branchy_body(2_000)`
/// (2.7 MB) over 100 s and 1.7 GB.
pub fn branchy_body(n: usize) -> Vec<u8> {
    let mut round = Vec::new();
    for i in 0u8..32 {
        let j = (i * 7 + 3) % 32;
        // if (local_i == 0) { local_i = local_j + local_i } else { local_j = local_i * local_j }
        round.extend_from_slice(&[0x20, i, 0x50, 0x04, 0x40, 0x20, j, 0x20, i, 0x7c, 0x21, i]);
        round.extend_from_slice(&[0x05, 0x20, i, 0x20, j, 0x7e, 0x21, j, 0x0b]);
    }
    let mut body = vec![0x03, 0x40];
    body.extend(round.repeat(n));
    body.push(0x0b);
    body
}

/// A module of 37 functions of `branchy_body(300)` (15 MB, just under the size that starts
/// on Winch): about 14 s of Cranelift on two cores, 200 MB at a time.
pub fn slow_module() -> Vec<u8> {
    module(37, 32, &branchy_body(300), 0)
}

/// Compile processes (`enoki __compile-module`) whose parent is `pid`, running or not yet
/// reaped (a zombie's command line is empty: its name is `enoki-compile`, or the binary's).
pub fn compile_children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
            let mut rest = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace())
                .into_iter()
                .flatten();
            let state = rest.next().unwrap_or_default().to_string();
            let parent = rest.next().and_then(|p| p.parse::<u32>().ok());
            let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
            let comm = std::fs::read_to_string(format!("/proc/{child}/comm")).unwrap_or_default();
            parent == Some(pid)
                && (String::from_utf8_lossy(&cmdline).contains("__compile-module")
                    || (state == "Z" && comm.trim().starts_with("enoki")))
        })
        .collect()
}
