;; Grows its table 100,000 elements at a time until refused, then traps.
(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "_start")
    (loop $grow
      (br_if $grow (i32.ne (table.grow $t (ref.null func) (i32.const 100000)) (i32.const -1))))
    unreachable))
