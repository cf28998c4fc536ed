;; failmix.wat (hostile): a condition that fails one way or another when the
;; Attempt's number says so, and has no opinion otherwise:
;;   100 traps (unreachable), 101 spins until the deadline (timeout),
;;   102 reads past its memory (memory fault), 103 answers garbage (an
;;   unknown decision action), 104 exits (proc_exit), 105 answers a
;;   negative result (a failure it reports itself).
;; Expected: every kind counts for the crash-loop breaker, which trips on a
;; failure rate (n failures within its window of calls), not only on
;; failures in a row.
(module
  (import "retryhost_v1" "buffer" (func $buffer (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "retryhost_abi_v1"))
  (func (export "retryhost_init") (param i32) (result i32)
    (call $buffer (i32.const 1024) (i32.const 4096)))
  (func (export "retryhost_decide") (param i32) (result i32)
    (local $n i32)
    (local.set $n (i32.load (i32.const 1024)))
    (if (i32.eq (local.get $n) (i32.const 100)) (then unreachable))
    (if (i32.eq (local.get $n) (i32.const 101)) (then (loop $spin (br $spin))))
    (if (i32.eq (local.get $n) (i32.const 102))
      (then (drop (i32.load (i32.const 0x7ffffff0)))))
    (if (i32.eq (local.get $n) (i32.const 103))
      (then
        (memory.fill (i32.const 1024) (i32.const 0) (i32.const 36))
        (i32.store8 (i32.const 1024) (i32.const 9))
        (return (i32.const 36))))
    (if (i32.eq (local.get $n) (i32.const 104)) (then (call $exit (i32.const 3))))
    (if (i32.eq (local.get $n) (i32.const 105)) (then (return (i32.const -1))))
    (i32.const 0)))
