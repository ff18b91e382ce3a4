;; Grows its one memory to 40 MiB, then its table by 600,000 elements (9.6 MB at 16 bytes
;; each): each alone fits a 48 MiB limit, together they do not. Traps when refused.
(module
  (memory (export "memory") 1)
  (table $t 1 funcref)
  (func (export "_start")
    (if (i32.eq (memory.grow (i32.const 639)) (i32.const -1)) (then unreachable))
    (if (i32.eq (table.grow $t (ref.null func) (i32.const 600000)) (i32.const -1))
      (then unreachable))))
