;; upper.wat: a well-behaved, stateless transform.
;; Every text-delta is REPLACEd by the same part with its delta upper-cased
;; (ASCII); every other part PASSes.
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
    (local $p i32) (local $end i32) (local $c i32) (local $idlen i32)
    (if (i32.ne (i32.load8_u (i32.const 1024)) (i32.const 4)) (then (return (i64.const 0))))
    (if (i32.gt_u (i32.add (local.get $len) (i32.const 8)) (i32.const 65536)) (then (return (i64.const 0))))
    ;; shift the part record right by 8 to make room for the Parts header
    (memory.copy (i32.const 1032) (i32.const 1024) (local.get $len))
    (i32.store (i32.const 1024) (i32.const 1))           ;; count
    (i32.store (i32.const 1028) (local.get $len))        ;; part length
    ;; delta starts after kind(4) + id(4+idlen) + dlen(4)
    (local.set $idlen (i32.load (i32.const 1036)))
    (local.set $p (i32.add (i32.const 1032) (i32.add (i32.const 12) (local.get $idlen))))
    (local.set $end (i32.add (local.get $p) (i32.load (i32.add (i32.const 1040) (local.get $idlen)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $p)))
        (if (i32.and (i32.ge_u (local.get $c) (i32.const 97)) (i32.le_u (local.get $c) (i32.const 122)))
          (then (i32.store8 (local.get $p) (i32.sub (local.get $c) (i32.const 32)))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    ;; REPLACE (4) with payload 8+len
    (i64.or (i64.shl (i64.extend_i32_u (i32.add (local.get $len) (i32.const 8))) (i64.const 32)) (i64.const 4))))
