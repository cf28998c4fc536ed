/* retryhost.h: the ABI v1 glue for C guests (abi/ABI.md), freestanding:
 * no libc, no allocator. Build with
 *   clang --target=wasm32 -nostdlib -O2 -mbulk-memory -Wl,--no-entry -Wl,--strip-all
 * Include it once per plugin; it defines the scratch buffer and the
 * version marker. */
#ifndef RETRYHOST_H
#define RETRYHOST_H

/* What a transform can rely on (ABI v1.3, abi/ABI.md §6.4, §8.4, §8.6,
 * §8.7):
 * - the finish part is always last: a PASS of it holds it until
 *   retryhost_end, so a list returned there goes out before it;
 * - an empty REPLACE list (count 0, or no payload) discards the held
 *   content and the part and emits nothing;
 * - a REPLACE (or DROP) of the provider's error part (kind 18) emits the
 *   list and keeps the error, which still fails the attempt;
 * - an empty text, reasoning or tool-input delta is a heartbeat: held, it
 *   counts for no hold cap;
 * - a part's payload is at most 16 MiB (abi.MaxPartSize): a larger one
 *   never reaches the guest; a record larger than the scratch buffer is
 *   read with rh_input. */

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef int i32;
typedef long long i64;

#define RH_IMPORT(name) __attribute__((import_module("retryhost_v1"), import_name(name)))
#define RH_EXPORT(name) __attribute__((export_name(name)))
/* NOINLINE keeps a big parser out of its callers: wazero compiles a large
 * function in more than linear time, which the load time pays. */
#define NOINLINE __attribute__((noinline))

RH_IMPORT("buffer") i32 rh_buffer(void *ptr, i32 cap);
RH_IMPORT("input") i32 rh_input(void *ptr, i32 cap);
RH_IMPORT("policy") i32 rh_policy(const void *ptr, i32 len);
RH_IMPORT("log") void rh_log(i32 level, const void *ptr, i32 len);

/* The version marker: present, never called. */
RH_EXPORT("retryhost_abi_v1") void rh_abi_v1(void) {}

#define RH_BUF_CAP 65536
static u8 rh_buf[RH_BUF_CAP] __attribute__((aligned(8)));

/* Action and verdict values (ABI.md §6.3, §8.2). */
enum { RH_PASS = 0, RH_HOLD = 1, RH_ERROR = 2, RH_DROP = 3, RH_REPLACE = 4, RH_DETACH = 5 };
enum { RH_NONE = 0, RH_RETRY = 1, RH_SWITCH = 2, RH_GIVE_UP = 3 };
#define RH_FAIL_VERDICT 0xffull /* not an action: the host applies the fail policy */

static inline u32 rd32(const u8 *p) { return (u32)p[0] | (u32)p[1] << 8 | (u32)p[2] << 16 | (u32)p[3] << 24; }
static inline u16 rd16(const u8 *p) { return (u16)(p[0] | p[1] << 8); }
static inline u64 rd64(const u8 *p) { return (u64)rd32(p) | (u64)rd32(p + 4) << 32; }
static inline void wr32(u8 *p, u32 v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static inline void wr64(u8 *p, u64 v) { wr32(p, (u32)v); wr32(p + 4, (u32)(v >> 32)); }

static inline void rh_copy(u8 *dst, const u8 *src, u32 n) { __builtin_memcpy(dst, src, n); }

/* rh_reject writes a reason at the start of the buffer and returns its
 * length, for retryhost_init to return. */
static i32 rh_reject(const char *msg) {
	u32 n = 0;
	while (msg[n] && n < 1024) { rh_buf[n] = (u8)msg[n]; n++; }
	return n ? (i32)n : -1;
}

#endif
