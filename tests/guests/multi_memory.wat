;; Declares eight linear memories of 56 MiB each (896 pages each) and fills them: under a
;; 64 MiB store limit it must not run (multi-memory is off, and the limit is per store).
(module
  (memory $m0 896) (memory $m1 896) (memory $m2 896) (memory $m3 896)
  (memory $m4 896) (memory $m5 896) (memory $m6 896) (memory $m7 896)
  (func (export "_start")
    (memory.fill $m0 (i32.const 0) (i32.const 1) (i32.const 58720256))
    (memory.fill $m7 (i32.const 0) (i32.const 1) (i32.const 58720256))))
