(module
  (import "wasi_snapshot_preview1" "sock_open_everything" (func $nope (param i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (drop (call $nope (i32.const 0)))))
