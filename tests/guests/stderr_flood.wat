;; Writes 100,000 lines to stderr (ignoring errors), then a valid empty ResourceList to stdout.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "a line of diagnostic noise\n")
  (data (i32.const 128) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[]}")
  (func (export "_start")
    (local $i i32)
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 27))
    (loop $lines
      (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $lines (i32.lt_u (local.get $i) (i32.const 100000))))
    (i32.store (i32.const 16) (i32.const 128))
    (i32.store (i32.const 20) (i32.const 73))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 8)))))
