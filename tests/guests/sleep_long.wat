;; Sleeps an hour in one WASI poll_oneoff (a blocking host call, not a busy loop).
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; 0..48 subscription: userdata 0, tag 0 (clock) at 8, clock id 1 (monotonic) at 16,
  ;; timeout at 24, precision 0 at 32, flags 0 (relative) at 40; 64..96 event; 96 nevents;
  ;; 128..136 iovec; 256.. text
  (data (i32.const 256) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}")
  (func (export "_start")
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 3600000000000))
    (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 96)))
    (i32.store (i32.const 128) (i32.const 256))
    (i32.store (i32.const 132) (i32.const 73))
    (drop (call $fd_write (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 136)))))
