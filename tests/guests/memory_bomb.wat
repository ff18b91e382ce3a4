;; Grows memory one 64 KiB page at a time until refused, then traps (as a real allocator would).
(module
  (memory (export "memory") 1)
  (func (export "_start")
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable))
