#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| enoki_fuzz::builtins(data));
