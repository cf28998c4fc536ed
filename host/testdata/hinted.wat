;; hinted.wat: an ABI v1.1 prefix-refusal detector (like refusal.wat) that
;; declares hints and exports retryhost_open_part, and counts every call it
;; gets in exported globals, so tests see which calls the host made.
;;
;; Hints (policy tail): auto_close; static verdicts: stream-start,
;; response-metadata, text-start PASS; reasoning-start HOLD;
;; reasoning-delta DROP; raw DETACH. When called for those kinds anyway it
;; answers the same. A text delta is HELD while the text matches "I can't",
;; answered ERROR (a refusal) once it all matched, DETACH at the first
;; mismatch; any other kind is HELD while text is held, else PASSed.
;;
;; It checks the host: a part, end or close of a handle it does not hold,
;; or an open of one it holds, counts in "bad". With auto_close it forgets
;; a stream by itself after answering ERROR or DETACH.
;;
;; Config (first byte): "m" declares a malformed hints tail (a static ERROR),
;; "n" declares no auto_close, "f" fails every open (open returns -1,
;; open_part answers the invalid action 255), "x" makes open_part answer
;; ERROR with a payload longer than the buffer (an ABI violation).
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "retryhost_v1" "input" (func $input (param i32 i32) (result i32)))
  (import "retryhost_v1" "policy" (func $policy (param i32 i32) (result i32)))
  (memory (export "memory") 3)
  ;; 0..7 pattern; 16..50 the error payload; 64..114 the policy record;
  ;; 200..215 the config; 1024..5120 the buffer (4 KiB); 8192..73728 big
  ;; inputs read with "input"; 80000.. 8 bytes per handle (open flag, matched).
  (data (i32.const 0) "I can't")
  (data (i32.const 16) "\01\0b\00\00\00\00\00\00\00\00\00\00\07\00\00\00i can't\07\00\00\00I can't")
  (data (i32.const 64)
    "\00\00\00\00" "\00\00\00\00" "\00\00\00\00" "\00\00\00\00" "\00\00\00\00\00\00\00\00"
    "\01\00\00\00" "\12\00\00\00"
    "\ff\00\00\00\ff\ff\01\03\ff\ff\ff\ff\ff\ff\ff\ff\ff\05")
  (global $calls (export "calls") (mut i32) (i32.const 0))
  (global $opens (export "opens") (mut i32) (i32.const 0))
  (global $open_parts (export "open_parts") (mut i32) (i32.const 0))
  (global $parts (export "parts") (mut i32) (i32.const 0))
  (global $batches (export "batches") (mut i32) (i32.const 0))
  (global $ends (export "ends") (mut i32) (i32.const 0))
  (global $closes (export "closes") (mut i32) (i32.const 0))
  (global $bad (export "bad") (mut i32) (i32.const 0))
  (global $policy_status (export "policy_status") (mut i32) (i32.const 1))
  (global $auto (mut i32) (i32.const 1))
  (global $failopen (mut i32) (i32.const 0))
  (global $badpayload (mut i32) (i32.const 0))
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param $n i32) (result i32)
    (local $c i32)
    (drop (call $input (i32.const 200) (i32.const 16)))
    (if (i32.gt_s (local.get $n) (i32.const 0))
      (then (local.set $c (i32.load8_u (i32.const 200)))))
    (if (i32.eq (local.get $c) (i32.const 109)) ;; m: a static ERROR for text-delta
      (then (i32.store8 (i32.const 100) (i32.const 2))))
    (if (i32.eq (local.get $c) (i32.const 110)) ;; n: no auto_close
      (then (i32.store (i32.const 88) (i32.const 0)) (global.set $auto (i32.const 0))))
    (if (i32.eq (local.get $c) (i32.const 102)) ;; f: opens fail
      (then (global.set $failopen (i32.const 1))))
    (if (i32.eq (local.get $c) (i32.const 120)) ;; x: open_part answers a bad payload
      (then (global.set $badpayload (i32.const 1))))
    (global.set $policy_status (call $policy (i32.const 64) (i32.const 50)))
    ;; a rejected policy declares no auto_close: keep every stream until its close
    (if (global.get $policy_status) (then (global.set $auto (i32.const 0))))
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func $slot (param $s i64) (result i32)
    (i32.add (i32.const 80000) (i32.shl (i32.wrap_i64 (local.get $s)) (i32.const 3))))
  (func $held (param $s i64) (result i32)
    (if (result i32) (i64.ge_u (local.get $s) (i64.const 14000))
      (then (i32.const 0))
      (else (i32.load (call $slot (local.get $s))))))
  (func $forget (param $s i64)
    (if (i64.lt_u (local.get $s) (i64.const 14000))
      (then (i32.store (call $slot (local.get $s)) (i32.const 0)))))
  (func $open (param $s i64) (result i32)
    (global.set $opens (i32.add (global.get $opens) (i32.const 1)))
    (if (global.get $failopen) (then (return (i32.const -1))))
    (if (i64.ge_u (local.get $s) (i64.const 14000)) (then (return (i32.const -1))))
    (if (call $held (local.get $s))
      (then (global.set $bad (i32.add (global.get $bad) (i32.const 1)))))
    (i32.store (call $slot (local.get $s)) (i32.const 1))
    (i32.store (i32.add (call $slot (local.get $s)) (i32.const 4)) (i32.const 0))
    (i32.const 0))
  (func (export "retryhost_open") (param $s i64) (param i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (call $open (local.get $s)))
  (func (export "retryhost_open_part") (param $s i64) (param $info i32) (param $len i32) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $open_parts (i32.add (global.get $open_parts) (i32.const 1)))
    (if (i32.lt_s (call $open (local.get $s)) (i32.const 0))
      (then (return (i64.const 255))))
    (if (global.get $badpayload)
      (then (return (i64.or (i64.shl (i64.const 100000) (i64.const 32)) (i64.const 2)))))
    (call $judge (local.get $s)
      (i32.add (i32.const 1024) (i32.and (i32.add (local.get $info) (i32.const 7)) (i32.const -8)))
      (i32.const 1024)))
  (func (export "retryhost_end") (param $s i64) (result i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $ends (i32.add (global.get $ends) (i32.const 1)))
    (if (i32.eqz (call $held (local.get $s)))
      (then (global.set $bad (i32.add (global.get $bad) (i32.const 1)))))
    (i64.const 0))
  (func (export "retryhost_close") (param $s i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $closes (i32.add (global.get $closes) (i32.const 1)))
    (if (i32.eqz (call $held (local.get $s)))
      (then (global.set $bad (i32.add (global.get $bad) (i32.const 1)))))
    (call $forget (local.get $s)))
  ;; judge the part record at $rec for stream $s; an ERROR payload goes to $out.
  (func $judge (param $s i64) (param $rec i32) (param $out i32) (result i64)
    (local $v i64)
    (if (i32.eqz (call $held (local.get $s)))
      (then (global.set $bad (i32.add (global.get $bad) (i32.const 1)))))
    (local.set $v (call $verdict (local.get $s) (local.get $rec) (local.get $out)))
    (if (i32.and (global.get $auto)
          (i32.or (i64.eq (i64.and (local.get $v) (i64.const 0xff)) (i64.const 2))
                  (i64.eq (i64.and (local.get $v) (i64.const 0xff)) (i64.const 5))))
      (then (call $forget (local.get $s))))
    (local.get $v))
  (func $verdict (param $s i64) (param $rec i32) (param $out i32) (result i64)
    (local $m i32) (local $p i32) (local $end i32) (local $idlen i32) (local $k i32)
    (local.set $k (i32.load8_u (local.get $rec)))
    (if (i32.and (i32.ge_u (local.get $k) (i32.const 1)) (i32.le_u (local.get $k) (i32.const 3)))
      (then (return (i64.const 0))))     ;; PASS (static)
    (if (i32.eq (local.get $k) (i32.const 6)) (then (return (i64.const 1))))   ;; HOLD (static)
    (if (i32.eq (local.get $k) (i32.const 7)) (then (return (i64.const 3))))   ;; DROP (static)
    (if (i32.eq (local.get $k) (i32.const 17)) (then (return (i64.const 5))))  ;; DETACH (static)
    (local.set $m (i32.load (i32.add (call $slot (local.get $s)) (i32.const 4))))
    (if (i32.ne (local.get $k) (i32.const 4))
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
    (i32.store (i32.add (call $slot (local.get $s)) (i32.const 4)) (local.get $m))
    (if (i32.eq (local.get $m) (i32.const 7))
      (then
        (memory.copy (local.get $out) (i32.const 16) (i32.const 34))
        (return (i64.or (i64.shl (i64.const 34) (i64.const 32)) (i64.const 2)))))  ;; ERROR
    (i64.const 1))                                          ;; HOLD
  (func (export "retryhost_part") (param $s i64) (param $len i32) (result i64)
    (local $rec i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $parts (i32.add (global.get $parts) (i32.const 1)))
    (local.set $rec (i32.const 1024))
    (if (i32.gt_u (local.get $len) (i32.const 4096))
      (then
        (drop (call $input (i32.const 8192) (i32.const 65536)))
        (local.set $rec (i32.const 8192))))
    (call $judge (local.get $s) (local.get $rec) (i32.const 1024)))
  (func (export "retryhost_parts") (param $count i32) (param $in_len i32) (result i32)
    (local $in i32) (local $out i32) (local $i i32) (local $v i64)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $batches (i32.add (global.get $batches) (i32.const 1)))
    (local.set $in (i32.const 1024))
    (local.set $out (i32.add (i32.const 1024)
      (i32.and (i32.add (local.get $in_len) (i32.const 7)) (i32.const -8))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $count)))
        ;; stop early if a result (8 + at most 34 bytes) might not fit
        (br_if $done (i32.gt_u (i32.add (local.get $out) (i32.const 42)) (i32.const 5120)))
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
