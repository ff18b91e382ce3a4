;; Reads stdin (discarding it), then writes
;; {"apiVersion":"config.kubernetes.io/v1","kind":"ResourceList","items":[],"seed":"<32 hex>","clock":"<16 hex>"}
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (memory (export "memory") 2)
  ;; 0..8 iovec, 8 nread, 16..40 raw bytes (16 random + 8 clock), 64.. text, 4096.. stdin buffer
  (data (i32.const 64) "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":[],\"seed\":\"")
  (data (i32.const 1024) "0123456789abcdef")
  (data (i32.const 1040) "\",\"clock\":\"\"}")
  (func $hex (param $src i32) (param $n i32) (param $dst i32)
    (local $i i32) (local $b i32)
    (loop $l
      (local.set $b (i32.load8_u (i32.add (local.get $src) (local.get $i))))
      (i32.store8 (local.get $dst) (i32.load8_u (i32.add (i32.const 1024) (i32.shr_u (local.get $b) (i32.const 4)))))
      (i32.store8 (i32.add (local.get $dst) (i32.const 1)) (i32.load8_u (i32.add (i32.const 1024) (i32.and (local.get $b) (i32.const 15)))))
      (local.set $dst (i32.add (local.get $dst) (i32.const 2)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (local.get $n)))))
  (func (export "_start")
    ;; drain stdin
    (block $done
      (loop $read
        (i32.store (i32.const 0) (i32.const 4096))
        (i32.store (i32.const 4) (i32.const 4096))
        (br_if $done (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8)))
        (br_if $read (i32.load (i32.const 8)))))
    (drop (call $random_get (i32.const 16) (i32.const 16)))
    (drop (call $clock (i32.const 0) (i64.const 1) (i32.const 32)))
    ;; prefix: 81 bytes at 64; seed hex at 145 (32); "\",\"clock\":\"" at 177 (11); clock hex at 188 (16); "\"}" at 204
    (call $hex (i32.const 16) (i32.const 16) (i32.const 145))
    (memory.copy (i32.const 177) (i32.const 1040) (i32.const 11))
    (call $hex (i32.const 32) (i32.const 8) (i32.const 188))
    (memory.copy (i32.const 204) (i32.const 1051) (i32.const 2))
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 142))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))
