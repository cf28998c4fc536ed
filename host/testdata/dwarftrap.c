/* dwarftrap.c (hostile): a condition carrying large DWARF debug info (about
 * 24,000 debugging entries: 1,024 generated functions, each with its own
 * struct type, locals and an inlined helper, built with -g) whose every
 * decision logs one line, recurses DEPTH calls deep through those functions
 * and traps there (unreachable).
 *
 * With debug info on, wazero resolves every frame of a trap's stack against
 * the DWARF by walking all of its entries under a per-module lock: a trap
 * costs DEPTH walks. The host keeps debug info off by default, so the trap
 * costs what the call costs.
 *
 * Config: DEPTH in decimal digits (1 to 100000; empty: 64), optionally
 * preceded by "ok " to return no opinion at that depth instead of trapping
 * (the benchmarks' baseline: the same call without the trap).
 *
 * Built by `make wasm` (clang 14 + lld, see the root Makefile):
 *   clang --target=wasm32 -nostdlib -O2 -g -gdwarf-4 -fdebug-compilation-dir=. \
 *     -Wl,--no-entry -o host/testdata/dwarftrap.wasm host/testdata/dwarftrap.c
 * DWARF 4 because wazero reads only its sections (.debug_ranges, not
 * DWARF 5's .debug_rnglists); -fdebug-compilation-dir keeps the checkout's
 * path out of the bytes. */
typedef unsigned char u8;
typedef unsigned int u32;
typedef int i32;

#define IMPORT(name) __attribute__((import_module("retryhost_v1"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))
#define NOINLINE __attribute__((noinline))

IMPORT("buffer") i32 rh_buffer(void *ptr, i32 cap);
IMPORT("input") i32 rh_input(void *ptr, i32 cap);
IMPORT("log") void rh_log(i32 level, const void *ptr, i32 len);

EXPORT("retryhost_abi_v1") void abi_v1(void) {}

static u8 buf[4096];
static u32 depth = 64;
static u32 trap = 1;
static volatile u32 sink;

extern u32 (*const table[])(u32);

/* F(id) is one function fn_<id> with its own struct type and an inlined
 * helper: about ten debugging entries. It calls a function picked from the
 * table (call_indirect, so nothing is inlined or dropped) until d is 0. */
#define F(id)                                                                  \
	struct s_##id {                                                            \
		u32 a, b, c, d, e, f, g, h;                                            \
	};                                                                         \
	static inline __attribute__((always_inline)) u32 mix_##id(struct s_##id *s, u32 k) { \
		u32 x = s->a ^ k;                                                      \
		u32 y = s->b + x;                                                      \
		return y * 0x##id##1u;                                                 \
	}                                                                          \
	NOINLINE static u32 fn_##id(u32 d) {                                       \
		if (d == 0) {                                                          \
			if (trap) __builtin_trap();                                        \
			return 0;                                                          \
		}                                                                      \
		struct s_##id s = {d, d + 1, d + 2, d + 3, d * 5, d ^ 7, d, 0x##id##u}; \
		u32 r = table[(d * 0x9e3779b1u + 0x##id##u) & 0x3ff](d - 1);           \
		return r + mix_##id(&s, d);                                            \
	}
#define X16(p) F(p##0) F(p##1) F(p##2) F(p##3) F(p##4) F(p##5) F(p##6) F(p##7) \
	F(p##8) F(p##9) F(p##a) F(p##b) F(p##c) F(p##d) F(p##e) F(p##f)
#define X256(p) X16(p##0) X16(p##1) X16(p##2) X16(p##3) X16(p##4) X16(p##5) X16(p##6) X16(p##7) \
	X16(p##8) X16(p##9) X16(p##a) X16(p##b) X16(p##c) X16(p##d) X16(p##e) X16(p##f)
#define X1024 X256(0) X256(1) X256(2) X256(3)

X1024

#undef F
#define F(id) fn_##id,
u32 (*const table[])(u32) = {X1024};

static const char accept_err[] = "config: want DEPTH (1 to 100000) or \"ok DEPTH\"";
static const char msg[] = "dwarftrap: this decision traps on purpose";

static i32 reject(void) {
	for (u32 i = 0; i < sizeof accept_err - 1; i++) buf[i] = (u8)accept_err[i];
	return (i32)(sizeof accept_err - 1);
}

EXPORT("retryhost_init") i32 init(i32 n) {
	if (rh_buffer(buf, sizeof buf) < 0) return -1;
	if (n < 0 || n > 64) return reject();
	if (n == 0) return 0;
	u8 cfg[64];
	if (rh_input(cfg, sizeof cfg) != n) return -1;
	i32 i = 0;
	if (n >= 3 && cfg[0] == 'o' && cfg[1] == 'k' && cfg[2] == ' ') {
		trap = 0;
		i = 3;
	}
	u32 v = 0;
	if (i == n) return reject();
	for (; i < n; i++) {
		if (cfg[i] < '0' || cfg[i] > '9' || v > 100000) return reject();
		v = v * 10 + (cfg[i] - '0');
	}
	if (v < 1 || v > 100000) return reject();
	depth = v;
	return 0;
}

EXPORT("retryhost_decide") i32 decide(i32 n) {
	(void)n;
	if (trap) rh_log(8, msg, sizeof msg - 1);
	sink = table[depth & 0x3ff](depth - 1);
	return 0;
}
