;; Writes its command-line arguments to stdout (each NUL-terminated, as WASI passes them).
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    ;; argc at 0, size of the argument bytes at 4
    (drop (call $sizes (i32.const 0) (i32.const 4)))
    ;; pointers at 64, bytes at 256
    (drop (call $get (i32.const 64) (i32.const 256)))
    ;; one iovec at 16: (256, size)
    (i32.store (i32.const 16) (i32.const 256))
    (i32.store (i32.const 20) (i32.load (i32.const 4)))
    (drop (call $write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 32)))))
