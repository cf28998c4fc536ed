/* refusal: a small refusal detector transform in C, deciding as package
 * refusalcore does (normalise the leading text, match phrases by prefix)
 * with the same per-stream state machine as the Go plugin and the native
 * detector:
 *   - stream start, response metadata and text start: HOLD;
 *   - a text delta: append it, normalise the text so far; it starts with a
 *     phrase: ERROR with a refusal; it is a prefix of one: HOLD; else DETACH;
 *   - any other part: DETACH; end of stream: PASS.
 *
 * Config: empty for the default phrases (phrases.h, the list of
 * refusalcore.DefaultPhrases), or one phrase per line (lines starting
 * with # are comments). A phrase that normalises to nothing is rejected.
 *
 * Limits (documented in plugins/README.md): case folding covers ASCII,
 * Latin-1, basic Greek and Cyrillic and the three runes whose lower case
 * is ASCII or Latin-1 (U+0130, U+212A, U+212B); other scripts' capitals
 * are compared as sent. With ASCII phrases (the default) this decides
 * exactly as refusalcore. A stream holds at most TEXT_CAP bytes of
 * undecided text; past that the plugin fails (fail-open: the stream then
 * passes untouched). At most TABLE_CAP/2 streams are open per instance. */
#include "retryhost.h"
#include "phrases.h"

/* ---- phrases ---- */

#define MAX_PHRASES 128
#define PHRASE_BYTES 8192
static u8 phr[PHRASE_BYTES];
static u32 phr_off[MAX_PHRASES], phr_len[MAX_PHRASES], nphr, phr_used, max_len;
static u8 cfg[PHRASE_BYTES];

/* ---- normalisation (refusalcore.AppendNormalized) ---- */

/* full reports whether s[0:n] begins with a complete (or invalid) UTF-8
 * sequence, as Go's utf8.FullRune: only a valid but cut sequence is not. */
static int full(const u8 *s, u32 n) {
	u8 c = s[0];
	u32 size;
	u8 lo = 0x80, hi = 0xbf;
	if (c < 0xc2 || c > 0xf4) return 1;
	if (c < 0xe0) size = 2;
	else if (c < 0xf0) { size = 3; if (c == 0xe0) lo = 0xa0; else if (c == 0xed) hi = 0x9f; }
	else { size = 4; if (c == 0xf0) lo = 0x90; else if (c == 0xf4) hi = 0x8f; }
	if (n >= size) return 1;
	if (n > 1 && (s[1] < lo || s[1] > hi)) return 1;
	if (n > 2 && (s[2] < 0x80 || s[2] > 0xbf)) return 1;
	return 0;
}

/* decode reads one rune (n >= 1, s[0] >= 0x80); invalid gives U+FFFD, 1. */
static u32 decode(const u8 *s, u32 n, u32 *size) {
	u8 c = s[0];
	u8 lo = 0x80, hi = 0xbf;
	*size = 1;
	if (c < 0xc2 || c > 0xf4) return 0xfffd;
	if (c < 0xe0) {
		if (n < 2 || s[1] < lo || s[1] > hi) return 0xfffd;
		*size = 2;
		return (u32)(c & 0x1f) << 6 | (s[1] & 0x3f);
	}
	if (c < 0xf0) {
		if (c == 0xe0) lo = 0xa0; else if (c == 0xed) hi = 0x9f;
		if (n < 3 || s[1] < lo || s[1] > hi || s[2] < 0x80 || s[2] > 0xbf) return 0xfffd;
		*size = 3;
		return (u32)(c & 0x0f) << 12 | (u32)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
	}
	if (c == 0xf0) lo = 0x90; else if (c == 0xf4) hi = 0x8f;
	if (n < 4 || s[1] < lo || s[1] > hi || s[2] < 0x80 || s[2] > 0xbf || s[3] < 0x80 || s[3] > 0xbf) return 0xfffd;
	*size = 4;
	return (u32)(c & 0x07) << 18 | (u32)(s[1] & 0x3f) << 12 | (u32)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
}

static int uspace(u32 r) {
	return r == 0x85 || r == 0xa0 || r == 0x1680 || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 ||
	       r == 0x2029 || r == 0x202f || r == 0x205f || r == 0x3000;
}

static u32 ulower(u32 r) {
	if ((r >= 0xc0 && r <= 0xde && r != 0xd7) || (r >= 0x391 && r <= 0x3ab && r != 0x3a2) || (r >= 0x410 && r <= 0x42f)) return r + 0x20;
	if (r >= 0x400 && r <= 0x40f) return r + 0x50;
	if (r == 0x130) return 'i';
	if (r == 0x212a) return 'k';
	if (r == 0x212b) return 0xe5;
	return r;
}

static u32 put_rune(u8 *d, u32 r) {
	if (r < 0x80) { d[0] = (u8)r; return 1; }
	if (r < 0x800) { d[0] = 0xc0 | r >> 6; d[1] = 0x80 | (r & 0x3f); return 2; }
	if (r < 0x10000) { d[0] = 0xe0 | r >> 12; d[1] = 0x80 | (r >> 6 & 0x3f); d[2] = 0x80 | (r & 0x3f); return 3; }
	d[0] = 0xf0 | r >> 18; d[1] = 0x80 | (r >> 12 & 0x3f); d[2] = 0x80 | (r >> 6 & 0x3f); d[3] = 0x80 | (r & 0x3f);
	return 4;
}

/* norm_state is where a normalisation stopped: the next input byte, the
 * output length, and a pending space. The scan is a left-to-right state
 * machine, so resuming from it over a longer input gives exactly the
 * output of normalising the whole input again. */
struct norm_state {
	u32 i, o;
	int space;
};

/* normalize_from continues the normalised form of s[0:n] into d from *st,
 * stopping once it has limit bytes (the decision never looks further) or at
 * a rune split at the end. d must hold limit + 4 bytes. */
static void normalize_from(const u8 *s, u32 n, u8 *d, u32 limit, struct norm_state *st) {
	u32 o = st->o, i = st->i;
	int space = st->space;
	while (i < n && o < limit) {
		u32 r = s[i], size = 1;
		if (r < 0x80) {
			i++;
			if (r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f') { space = 1; continue; }
			if (r >= 'A' && r <= 'Z') r += 'a' - 'A';
		} else {
			if (!full(s + i, n - i)) break; /* a rune split across deltas: wait */
			r = decode(s + i, n - i, &size);
			i += size;
			if (uspace(r)) { space = 1; continue; }
			if (r == 0x2018 || r == 0x2019 || r == 0x2bc || r == 0x2032 || r == 0xff07) r = '\'';
			else r = ulower(r);
		}
		if (space && o > 0) d[o++] = ' ';
		space = 0;
		o += put_rune(d + o, r);
	}
	st->i = i;
	st->o = o;
	st->space = space;
}

static u32 normalize(const u8 *s, u32 n, u8 *d, u32 limit) {
	struct norm_state st = {0, 0, 0};
	normalize_from(s, n, d, limit, &st);
	return st.o;
}

/* ---- per-stream state ---- */

#define TEXT_CAP 1000
#define NORM_CAP 208 /* MAX_PHRASE + 1 + 4 */
#define MAX_PHRASE 200
struct slot {
	u32 next_free;         /* free list link, index + 1 */
	u16 len;               /* bytes of text */
	u8 decided;            /* answered ERROR or DETACH: later parts (in a batch) pass */
	u8 pad;
	struct norm_state ns;  /* where the normalisation of text stopped */
	u64 dead[2];           /* phrases the normalised text can no longer become */
	u8 norm[NORM_CAP];     /* the normalised text, up to max_len + 1 bytes */
	u8 text[TEXT_CAP];
};
#define SLOTS_PER_PAGE (65536 / sizeof(struct slot))

/* The handle table: open addressing, linear probing, backward-shift
 * deletion. Slots live in pages grown on demand. */
#define TABLE_CAP 8192
static i64 tab_h[TABLE_CAP];
static u32 tab_s[TABLE_CAP]; /* slot index + 1, 0 = empty */
static u32 nopen;
static struct slot *pages[(TABLE_CAP / 2) / SLOTS_PER_PAGE + 2];
static u32 npages, free_head;

static struct slot *slot_at(u32 idx) { return &pages[idx / SLOTS_PER_PAGE][idx % SLOTS_PER_PAGE]; }

static u32 home(i64 h) { return (u32)(((u64)h * 0x9e3779b97f4a7c15ull) >> 51) & (TABLE_CAP - 1); }

static u32 find(i64 h) {
	for (u32 i = home(h);; i = (i + 1) & (TABLE_CAP - 1)) {
		if (tab_s[i] == 0) return TABLE_CAP;
		if (tab_h[i] == h) return i;
	}
}

static u32 slot_alloc(void) {
	if (free_head == 0) {
		if (npages == sizeof pages / sizeof pages[0]) return 0;
		long old = __builtin_wasm_memory_grow(0, 1);
		if (old < 0) return 0;
		pages[npages] = (struct slot *)(old * 65536);
		for (u32 k = 0; k < SLOTS_PER_PAGE; k++) {
			u32 idx = npages * SLOTS_PER_PAGE + k;
			pages[npages][k].next_free = free_head;
			free_head = idx + 1;
		}
		npages++;
	}
	u32 idx = free_head - 1;
	free_head = slot_at(idx)->next_free;
	return idx + 1;
}

static struct slot *lookup(i64 h) {
	u32 i = find(h);
	return i == TABLE_CAP ? 0 : slot_at(tab_s[i] - 1);
}

/* ---- exports ---- */

static i32 add_phrase(const u8 *s, u32 n) {
	if (nphr == MAX_PHRASES || phr_used + n + 4 > PHRASE_BYTES) return rh_reject("config: too many phrases");
	u32 len = normalize(s, n, phr + phr_used, PHRASE_BYTES - phr_used - 4);
	if (len == 0) return rh_reject("config: empty phrase");
	if (len > MAX_PHRASE) return rh_reject("config: phrase longer than 200 bytes once normalised");
	phr_off[nphr] = phr_used;
	phr_len[nphr] = len;
	phr_used += len;
	if (len > max_len) max_len = len;
	nphr++;
	return 0;
}

RH_EXPORT("retryhost_init") i32 rh_init(i32 len) {
	if (rh_buffer(rh_buf, RH_BUF_CAP) != 0) return -1;
	if (len < 0 || len > (i32)sizeof cfg) return rh_reject("config: longer than 8192 bytes");
	if (len > 0 && rh_input(cfg, len) != len) return -1;
	u32 i = 0;
	while (i < (u32)len) {
		u32 j = i;
		while (j < (u32)len && cfg[j] != '\n') j++;
		u32 e = j, b = i;
		while (b < e && (cfg[b] == ' ' || cfg[b] == '\t' || cfg[b] == '\r')) b++;
		if (b < e && cfg[b] != '#') {
			i32 r = add_phrase(cfg + i, e - i);
			if (r != 0) return r;
		}
		i = j + 1;
	}
	if (nphr == 0) {
		for (u32 k = 0; k < sizeof default_phrases / sizeof default_phrases[0]; k++) {
			const char *p = default_phrases[k];
			u32 n = 0;
			while (p[n]) n++;
			i32 r = add_phrase((const u8 *)p, n);
			if (r != 0) return r;
		}
	}
	return 0;
}

RH_EXPORT("retryhost_open") i32 rh_open(i64 h, i32 info_len) {
	(void)info_len;
	if (nopen >= TABLE_CAP / 2 || find(h) != TABLE_CAP) return -1;
	u32 s = slot_alloc();
	if (s == 0) return -1;
	struct slot *st = slot_at(s - 1);
	st->len = 0;
	st->decided = 0;
	st->ns.i = st->ns.o = 0;
	st->ns.space = 0;
	st->dead[0] = st->dead[1] = 0;
	u32 i = home(h);
	while (tab_s[i] != 0) i = (i + 1) & (TABLE_CAP - 1);
	tab_h[i] = h;
	tab_s[i] = s;
	nopen++;
	return 0;
}

RH_EXPORT("retryhost_close") void rh_close(i64 h) {
	u32 i = find(h);
	if (i == TABLE_CAP) return;
	u32 s = tab_s[i];
	slot_at(s - 1)->next_free = free_head;
	free_head = s;
	nopen--;
	/* backward-shift deletion keeps every probe chain unbroken */
	u32 j = i;
	for (;;) {
		tab_s[i] = 0;
		for (;;) {
			j = (j + 1) & (TABLE_CAP - 1);
			if (tab_s[j] == 0) return;
			u32 k = home(tab_h[j]);
			if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
			break;
		}
		tab_h[i] = tab_h[j];
		tab_s[i] = tab_s[j];
		i = j;
	}
}

/* part judges one Part record; a payload goes to out. Per text delta it
 * costs O(delta + live phrases × new bytes): the normalisation resumes
 * where it stopped, and a phrase the text diverged from is never looked at
 * again (the normalised text only grows, so a divergence is final). The
 * outcome is refusalcore's: the first phrase in list order the text starts
 * with is a match; else any phrase the text is a prefix of is a hold; else
 * a divergence. */
static u64 part(struct slot *st, const u8 *rec, u32 len, u8 *out, u32 room) {
	if (st->decided) return RH_PASS;
	if (len < 12) return RH_FAIL_VERDICT;
	switch (rec[0]) {
	case 1: case 2: case 3:
		return RH_HOLD;
	case 4:
		break;
	default:
		st->decided = 1;
		return RH_DETACH;
	}
	u32 idn = rd32(rec + 4);
	if (idn > len - 12) return RH_FAIL_VERDICT;
	u32 dn = rd32(rec + 8 + idn);
	if (dn > len - 12 - idn) return RH_FAIL_VERDICT;
	if (dn > TEXT_CAP - st->len) return RH_FAIL_VERDICT;
	rh_copy(st->text + st->len, rec + 12 + idn, dn);
	st->len += dn;
	u32 prev = st->ns.o;
	normalize_from(st->text, st->len, st->norm, max_len + 1, &st->ns);
	u32 n = st->ns.o;
	int prefix = 0;
	for (u32 k = 0; k < nphr; k++) {
		if (st->dead[k >> 6] >> (k & 63) & 1) continue;
		const u8 *p = phr + phr_off[k];
		u32 pl = phr_len[k], m = n < pl ? n : pl, c = prev < m ? prev : m;
		while (c < m && st->norm[c] == p[c]) c++;
		if (c < m) {
			st->dead[k >> 6] |= 1ull << (k & 63);
			continue;
		}
		if (n >= pl) {
			/* Error record (ABI.md §8.5): a refusal with phrase and text. */
			u32 sz = 8 + 4 + 4 + pl + 4 + st->len;
			if (sz > room) return RH_FAIL_VERDICT;
			out[0] = 1; out[1] = 11; out[2] = out[3] = 0;
			wr32(out + 4, 0);
			wr32(out + 8, 0);
			wr32(out + 12, pl);
			rh_copy(out + 16, p, pl);
			wr32(out + 16 + pl, st->len);
			rh_copy(out + 20 + pl, st->text, st->len);
			st->decided = 1;
			return (u64)sz << 32 | RH_ERROR;
		}
		prefix = 1;
	}
	if (prefix) return RH_HOLD;
	st->decided = 1;
	return RH_DETACH;
}

RH_EXPORT("retryhost_part") i64 rh_part(i64 h, i32 len) {
	struct slot *st = lookup(h);
	if (!st || len < 0 || len > RH_BUF_CAP) return (i64)RH_FAIL_VERDICT;
	return (i64)part(st, rh_buf, (u32)len, rh_buf, RH_BUF_CAP);
}

/* retryhost_parts: entries judged in order, results from align8(in_len);
 * it returns the number judged, stopping before an entry whose result might
 * not fit (the host sends the rest again). */
RH_EXPORT("retryhost_parts") i32 rh_parts(i32 count, i32 in_len) {
	if (count < 0 || in_len < 0 || in_len > RH_BUF_CAP) return -1;
	u32 reserve = 8 + 20 + max_len + TEXT_CAP; /* the largest result: a refusal */
	u32 at = ((u32)in_len + 7) & ~7u, off = 0;
	for (i32 e = 0; e < count; e++) {
		if (at + reserve > RH_BUF_CAP) return e;
		if (off + 12 > (u32)in_len) return -1;
		i64 h = (i64)rd64(rh_buf + off);
		u32 n = rd32(rh_buf + off + 8);
		off += 12;
		if (n > (u32)in_len - off) return -1;
		struct slot *st = lookup(h);
		if (!st) return -1;
		u64 v = part(st, rh_buf + off, n, rh_buf + at + 8, RH_BUF_CAP - at - 8);
		if (v == RH_FAIL_VERDICT) return -1;
		wr64(rh_buf + at, v);
		at += 8 + (u32)(v >> 32);
		off += n;
	}
	return count;
}

RH_EXPORT("retryhost_end") i64 rh_end(i64 h) { return lookup(h) ? RH_PASS : (i64)RH_FAIL_VERDICT; }
