;; redacttool.wat: REPLACEs every tool-result part by the same part (its
;; flags, id and tool name) with an empty input and the result "[]", a
;; redaction of what the tool returned; every other part PASSes.
;; Expected: nothing of the original result reaches the caller, the
;; provider's raw chunk of it included (ABI v1.3 §6.5).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func (export "retryhost_open") (param i64 i32) (result i32) (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  (func (export "retryhost_part") (param $stream i64) (param $len i32) (result i64)
    (local $p i32) (local $rec i32)
    (if (i32.ne (i32.load8_u (i32.const 1024)) (i32.const 13)) (then (return (i64.const 0))))
    (if (i32.gt_u (i32.add (local.get $len) (i32.const 16)) (i32.const 65536)) (then (return (i64.const 0))))
    ;; p: the offset after the id, the delta and the tool name
    (local.set $p (i32.const 4))
    (local.set $p (i32.add (local.get $p) (i32.add (i32.const 4) (i32.load (i32.add (i32.const 1024) (local.get $p))))))
    (local.set $p (i32.add (local.get $p) (i32.add (i32.const 4) (i32.load (i32.add (i32.const 1024) (local.get $p))))))
    (local.set $p (i32.add (local.get $p) (i32.add (i32.const 4) (i32.load (i32.add (i32.const 1024) (local.get $p))))))
    ;; the record: that prefix, moved right by 8 for the list's header
    (memory.copy (i32.const 1032) (i32.const 1024) (local.get $p))
    (i32.store (i32.add (i32.const 1032) (local.get $p)) (i32.const 0))   ;; input ""
    (i32.store (i32.add (i32.const 1036) (local.get $p)) (i32.const 2))   ;; result "[]"
    (i32.store16 (i32.add (i32.const 1040) (local.get $p)) (i32.const 0x5d5b))
    (local.set $rec (i32.add (local.get $p) (i32.const 10)))
    (i32.store (i32.const 1024) (i32.const 1))
    (i32.store (i32.const 1028) (local.get $rec))
    (i64.or (i64.shl (i64.extend_i32_u (i32.add (local.get $rec) (i32.const 8))) (i64.const 32)) (i64.const 4))))
