;; Asks the host for 16 MiB of randomness in one random_get (a host-side allocation of the
;; size the guest names), then writes an empty ResourceList.
(module
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 272)
  (data (i32.const 256) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}")
  (func (export "_start")
    (drop (call $random_get (i32.const 65536) (i32.const 16777216)))
    (i32.store (i32.const 128) (i32.const 256))
    (i32.store (i32.const 132) (i32.const 73))
    (drop (call $fd_write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 136)))))
