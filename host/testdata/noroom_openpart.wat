;; noroom_openpart.wat (ABI v1.2): a transform with room for one stream per
;; instance that exports retryhost_open_part (so the host opens through it)
;; and answers the i64 -6 (OpenNoRoom) when it is full. Parts PASS. A
;; refusal is not a failure of the plugin.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $open (mut i32) (i32.const 0))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_open") (param i64 i32) (result i32)
    (if (global.get $open) (then (return (i32.const -6))))
    (global.set $open (i32.const 1))
    (i32.const 0))
  (func (export "retryhost_open_part") (param i64 i32 i32) (result i64)
    (if (global.get $open) (then (return (i64.const -6))))
    (global.set $open (i32.const 1))
    (i64.const 0))
  (func (export "retryhost_part") (param i64 i32) (result i64) (i64.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64) (global.set $open (i32.const 0))))
