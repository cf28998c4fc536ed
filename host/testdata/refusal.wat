;; refusal.wat: a well-behaved, stateful prefix-refusal detector.
;; It HOLDs the leading text of a stream while it matches "I can't"; when the
;; whole phrase matched it fails the stream with a refusal (ERROR); at the
;; first mismatch it DETACHes, releasing what it held. Non-text parts are held
;; while text is held (to keep order) and passed otherwise. State per stream:
;; one i32 (bytes matched) in a table indexed by the stream handle.
;; It exports the optional batch form, retryhost_parts.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (memory (export "memory") 3)
  ;; 0..7 pattern; 16..50 the error payload; 1024..66560 buffer; 69632.. table (4 B per handle, 32768 handles)
  (data (i32.const 0) "I can't")
  (data (i32.const 16) "\01\0b\00\00\00\00\00\00\00\00\00\00\07\00\00\00i can't\07\00\00\00I can't")
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 65536)))
  (func $slot (param $s i64) (result i32)
    (i32.add (i32.const 69632) (i32.shl (i32.wrap_i64 (local.get $s)) (i32.const 2))))
  (func (export "retryhost_open") (param $s i64) (param i32) (result i32)
    (if (i64.ge_u (local.get $s) (i64.const 32768)) (then (return (i32.const -1))))
    (i32.store (call $slot (local.get $s)) (i32.const 0))
    (i32.const 0))
  (func (export "retryhost_end") (param i64) (result i64) (i64.const 0))
  (func (export "retryhost_close") (param i64))
  ;; judge the part record at $rec for stream $s; an ERROR payload goes to $out.
  (func $judge (param $s i64) (param $rec i32) (param $out i32) (result i64)
    (local $m i32) (local $p i32) (local $end i32) (local $idlen i32)
    (local.set $m (i32.load (call $slot (local.get $s))))
    (if (i32.ne (i32.load8_u (local.get $rec)) (i32.const 4))
      (then (return (select (i64.const 1) (i64.const 0) (local.get $m)))))
    (local.set $idlen (i32.load (i32.add (local.get $rec) (i32.const 4))))
    (local.set $p (i32.add (i32.add (local.get $rec) (i32.const 12)) (local.get $idlen)))
    (local.set $end (i32.add (local.get $p)
      (i32.load (i32.add (i32.add (local.get $rec) (i32.const 8)) (local.get $idlen)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $end)))
        (br_if $done (i32.eq (local.get $m) (i32.const 7)))
        (if (i32.ne (i32.load8_u (local.get $p)) (i32.load8_u (local.get $m)))
          (then (return (i64.const 5))))                   ;; DETACH
        (local.set $m (i32.add (local.get $m) (i32.const 1)))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (i32.store (call $slot (local.get $s)) (local.get $m))
    (if (i32.eq (local.get $m) (i32.const 7))
      (then
        (memory.copy (local.get $out) (i32.const 16) (i32.const 34))
        (return (i64.or (i64.shl (i64.const 34) (i64.const 32)) (i64.const 2)))))  ;; ERROR
    (i64.const 1))                                          ;; HOLD
  (func (export "retryhost_part") (param $s i64) (param $len i32) (result i64)
    (call $judge (local.get $s) (i32.const 1024) (i32.const 1024)))
  (func (export "retryhost_parts") (param $count i32) (param $in_len i32) (result i32)
    (local $in i32) (local $out i32) (local $i i32) (local $v i64)
    (local.set $in (i32.const 1024))
    (local.set $out (i32.add (i32.const 1024)
      (i32.and (i32.add (local.get $in_len) (i32.const 7)) (i32.const -8))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        ;; stop early if a result (8 + at most 34 bytes) might not fit
        (br_if $done (i32.gt_u (i32.add (local.get $out) (i32.const 42)) (i32.const 66560)))
        (local.set $v (call $judge
          (i64.load (local.get $in))
          (i32.add (local.get $in) (i32.const 12))
          (i32.add (local.get $out) (i32.const 8))))
        (i64.store (local.get $out) (local.get $v))
        (local.set $out (i32.add (local.get $out)
          (i32.add (i32.const 8) (i32.wrap_i64 (i64.shr_u (local.get $v) (i64.const 32))))))
        (local.set $in (i32.add (i32.add (local.get $in) (i32.const 12)) (i32.load (i32.add (local.get $in) (i32.const 8)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (local.get $i)))
