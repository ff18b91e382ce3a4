(module
  (memory (export "memory") 1)
  (func $deep (unreachable))
  (func $middle (call $deep))
  (func (export "_start") (call $middle)))
