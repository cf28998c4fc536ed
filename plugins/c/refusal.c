/* refusal: a small refusal detector transform in C, deciding as package
 * refusalcore does (normalise the leading text, match phrases by prefix)
 * with the same per-stream state machine as the Go plugin and the native
 * detector:
 *   - stream start, response metadata and text start: HOLD;
 *   - a text delta: append it, normalise the text so far; it starts with a
 *     phrase: ERROR with a refusal; it is a prefix of one: HOLD; else DETACH;
 *   - reasoning (kinds 6-8) and source (15) parts: HOLD with
 *     "reasoning": "hold", else DETACH;
 *   - any other part: DETACH; end of stream: PASS.
 * It is an ABI v1.1 guest: it declares those per-kind answers as static
 * verdicts (HOLD for kinds 1-3, DETACH for 5-18 but those the reasoning
 * option holds) and auto_close, forgets a
 * stream by itself once it answers ERROR or DETACH, and exports
 * retryhost_open_part. On a host that ignores the hints (v1.0) it answers
 * every call the same, and ignores the close of a stream it forgot.
 *
 * The phrases are compiled at init into a byte trie stored as a dense
 * transition table (as refusalcore's State does): per text delta the
 * normalisation resumes where it stopped and each new normalised byte is
 * one table load, whatever the number of phrases.
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
#include "json.h"
#include "lower.h"

#define MAX_CAP 2147483647

typedef short i16;

/* ---- phrases ---- */

#define MAX_PHRASES 128
#define PHRASE_BYTES 8192
static u8 phr[PHRASE_BYTES];
static u32 phr_off[MAX_PHRASES], phr_len[MAX_PHRASES], nphr, phr_used, max_len;

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

/* ulower is Go's unicode.ToLower over lower.h's table (generated from
 * unicode.CaseRanges), so a phrase in any script decides as refusalcore. */
static u32 ulower(u32 r) {
	u32 lo = 0, hi = sizeof lower_ranges / sizeof lower_ranges[0];
	while (lo < hi) {
		u32 m = (lo + hi) / 2;
		if (r > lower_ranges[m].hi) lo = m + 1;
		else if (r < lower_ranges[m].lo) hi = m;
		else {
			i32 d = lower_ranges[m].d;
			if (d == LOWER_ALT) return lower_ranges[m].lo + (((r - lower_ranges[m].lo) & ~1u) | 1);
			return (u32)((i32)r + d);
		}
	}
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

/* ---- the phrases' trie (refusalcore's dfa.go) ----
 *
 * next[node * ncls + class(byte)] is the next node (>= 0), or a final
 * decision (< 0): -1 diverge, -2-k a match of phrase k that no phrase
 * earlier in the list can still override. mat[node] is the first phrase in
 * list order the node's path starts with, or -1. Node ids fit an i16: at
 * most PHRASE_BYTES + 1 nodes. The table lives in pages grown at init. */

#define MAX_NODES (PHRASE_BYTES + 1)
#define CLASS_RUNE 254  /* raw: a byte >= 0x80, decoded as a rune first */
#define CLASS_SPACE 255 /* raw: ASCII white space */
#define NONE 0x7fff
static u8 cls[256], raw[256], spc;
static u32 ncls, nnodes;
static i16 *next;
static i16 mat[MAX_NODES], below[MAX_NODES];

static i32 compile(void) {
	ncls = 1;
	for (u32 i = 0; i < phr_used; i++)
		if (cls[phr[i]] == 0) cls[phr[i]] = (u8)ncls++;
	spc = cls[' '];
	for (u32 c = 0; c < 256; c++) {
		if (c >= 0x80) raw[c] = CLASS_RUNE;
		else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') raw[c] = CLASS_SPACE;
		else if (c >= 'A' && c <= 'Z') raw[c] = cls[c + 'a' - 'A'];
		else raw[c] = cls[c];
	}
	/* room for the most nodes the phrases can make; grown memory is zero */
	u32 bytes = (phr_used + 1) * ncls * sizeof(i16);
	long old = __builtin_wasm_memory_grow(0, (bytes + 65535) / 65536);
	if (old < 0) return rh_reject("config: out of memory for the phrase table");
	next = (i16 *)(old * 65536);
	/* the trie: 0 = no child (the root is no one's child); mat[] holds
	 * the first phrase ending at each node until the passes below */
	nnodes = 1;
	mat[0] = NONE;
	for (u32 k = 0; k < nphr; k++) {
		u32 n = 0;
		const u8 *p = phr + phr_off[k];
		for (u32 i = 0; i < phr_len[k]; i++) {
			u32 at = n * ncls + cls[p[i]];
			if (next[at] == 0) { mat[nnodes] = NONE; next[at] = (i16)nnodes++; }
			n = (u32)next[at];
		}
		if ((i32)k < mat[n]) mat[n] = (i16)k;
	}
	/* children have higher ids than their parents: below[] (the first
	 * phrase ending strictly under a node) flows up in reverse id order,
	 * then mat[] (first phrase on the path) down in id order */
	for (u32 n = nnodes; n-- > 0;) {
		i16 b = NONE;
		for (u32 c = 0; c < ncls; c++) {
			i16 ch = next[n * ncls + c];
			if (ch == 0) continue;
			if (mat[ch] < b) b = mat[ch];
			if (below[ch] < b) b = below[ch];
		}
		below[n] = b;
	}
	for (u32 n = 0; n < nnodes; n++) {
		for (u32 c = 0; c < ncls; c++) {
			i16 ch = next[n * ncls + c];
			if (ch != 0 && mat[n] < mat[ch]) mat[ch] = mat[n];
		}
	}
	/* fold the decisions into the table */
	for (u32 n = 0; n < nnodes; n++) {
		i16 fall = mat[n] == NONE ? -1 : (i16)(-2 - mat[n]);
		for (u32 c = 0; c < ncls; c++) {
			i16 *t = &next[n * ncls + c];
			if (*t == 0) *t = fall;
			else if (mat[*t] != NONE && below[*t] > mat[*t]) *t = (i16)(-2 - mat[*t]);
		}
		if (mat[n] == NONE) mat[n] = -1;
	}
	return 0;
}

/* ---- per-stream state ---- */

#define TEXT_CAP 1000
#define MAX_PHRASE 200
struct slot {
	u32 next_free; /* free list link, index + 1 */
	u16 len;       /* bytes of text */
	u8 space;      /* a run of white space is pending in the normalisation */
	u8 pad;
	u32 at;        /* the next byte of text to normalise */
	i32 node;      /* the trie node of the normalised text, or a decision < 0 */
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

/* add_phrase normalises and keeps one phrase; 0 (with the reason) when a
 * limit is hit. */
static int add_phrase(const u8 *s, u32 n) {
	static u8 tmp[MAX_PHRASE + 8];
	J.key = (const u8 *)"phrases";
	J.keylen = 7;
	if (nphr == MAX_PHRASES) return fail("more than 128 phrases");
	u32 len = normalize(s, n, tmp, MAX_PHRASE + 1);
	if (len == 0) return fail("a phrase is empty once normalised");
	if (len > MAX_PHRASE) return fail("a phrase is longer than 200 bytes once normalised");
	if (phr_used + len > PHRASE_BYTES) return fail("the phrases are longer than 8192 bytes in all once normalised");
	rh_copy(phr + phr_used, tmp, len);
	phr_off[nphr] = phr_used;
	phr_len[nphr] = len;
	phr_used += len;
	if (len > max_len) max_len = len;
	nphr++;
	return 1;
}

/* The config (JSON, as the Go build's): every field optional. */
static u8 fail_closed, on_cap, hold_aside;
static i64 max_held_parts, max_held_bytes, max_hold_time;
static u8 sbuf[CFG_CAP];

static int add_default_phrases(void) {
	for (u32 k = 0; k < sizeof default_phrases / sizeof default_phrases[0]; k++) {
		const char *p = default_phrases[k];
		u32 n = 0;
		while (p[n]) n++;
		if (!add_phrase((const u8 *)p, n)) return 0;
	}
	return 1;
}

static int parse_config(i32 len) {
	int r = js_start(len);
	if (r <= 0) return r == 0;
	u32 seen = 0, count = 0, n;
	if (!obj_begin()) return 0;
	while (obj_next(&count)) {
		if (key_is("phrases")) {
			if (!field(&seen, 0, "phrases") || !arr_begin()) return 0;
			u32 k = 0;
			while (arr_next(&k))
				if (!str(sbuf, sizeof sbuf, &n, "too long") || !add_phrase(sbuf, n)) return 0;
		} else if (key_is("fail")) {
			if (!field(&seen, 1, "fail") || !str(sbuf, 16, &n, "must be \"open\" or \"closed\"")) return 0;
			if (bytes_eq(sbuf, n, "closed")) fail_closed = 1;
			else if (n != 0 && !bytes_eq(sbuf, n, "open")) return fail("must be \"open\" or \"closed\"");
		} else if (key_is("on_cap")) {
			if (!field(&seen, 2, "on_cap") || !str(sbuf, 16, &n, "must be \"flush\" or \"fail\"")) return 0;
			/* the Policy record's on_cap (ABI v1.2): "" 0 follows the fail
			 * policy, "fail" 1, "flush" 2 */
			if (bytes_eq(sbuf, n, "fail")) on_cap = 1;
			else if (bytes_eq(sbuf, n, "flush")) on_cap = 2;
			else if (n != 0) return fail("must be \"flush\" or \"fail\"");
		} else if (key_is("max_held_parts")) {
			if (!field(&seen, 3, "max_held_parts") || !integer(MAX_CAP, &max_held_parts, "want an integer 0-2147483647")) return 0;
		} else if (key_is("max_held_bytes")) {
			if (!field(&seen, 4, "max_held_bytes") || !integer(MAX_CAP, &max_held_bytes, "want an integer 0-2147483647")) return 0;
		} else if (key_is("max_hold_time")) {
			if (!field(&seen, 5, "max_hold_time") || !dur(&max_hold_time, "want a non-negative Go duration such as \"10s\"")) return 0;
		} else if (key_is("reasoning")) {
			if (!field(&seen, 6, "reasoning") || !str(sbuf, 16, &n, "must be \"detach\" or \"hold\"")) return 0;
			if (bytes_eq(sbuf, n, "hold")) hold_aside = 1;
			else if (n != 0 && !bytes_eq(sbuf, n, "detach")) return fail("must be \"detach\" or \"hold\"");
		} else {
			return unknown();
		}
	}
	return js_finish();
}

/* aside reports whether the reasoning option holds kind k: reasoning
 * (6-8) and source (15) parts are no words of the answer, so the text after
 * them is still its opening. A raw part (17) never reaches a transform
 * (ABI.md §6.5). */
static int aside(u32 k) { return hold_aside && ((k >= 6 && k <= 8) || k == 15); }

RH_EXPORT("retryhost_init") i32 rh_init(i32 len) {
	if (rh_buffer(rh_buf, RH_BUF_CAP) != 0) return -1;
	if (!parse_config(len)) return (i32)em_len;
	if (nphr == 0 && !add_default_phrases()) return (i32)em_len;
	i32 r = compile();
	if (r != 0) return r;
	/* Policy (ABI.md §8.7): the config's, then the v1.1 hints: auto_close,
	 * and the answer to every kind this detector does not read. A v1.0
	 * host reads the first 24 bytes. */
	static u8 pol[32 + 19];
	pol[0] = fail_closed;
	pol[1] = on_cap;
	wr32(pol + 4, (u32)max_held_parts);
	wr32(pol + 8, (u32)max_held_bytes);
	wr64(pol + 16, (u64)max_hold_time);
	wr32(pol + 24, 1); /* flags: auto_close */
	wr32(pol + 28, 19);
	pol[32 + 0] = 0xff;
	for (u32 k = 1; k < 19; k++) pol[32 + k] = k <= 3 ? RH_HOLD : k == 4 ? 0xff : aside(k) ? RH_HOLD : RH_DETACH;
	rh_policy(pol, sizeof pol);
	return 0;
}

RH_EXPORT("retryhost_open") i32 rh_open(i64 h, i32 info_len) {
	(void)info_len;
	if (nopen >= TABLE_CAP / 2 || find(h) != TABLE_CAP) return -1;
	u32 s = slot_alloc();
	if (s == 0) return -1;
	struct slot *st = slot_at(s - 1);
	st->len = 0;
	st->space = 0;
	st->at = 0;
	st->node = 0;
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

/* walk normalises the text from where it stopped (as normalize_from) and
 * steps each normalised byte through the trie, until a final decision or a
 * rune split at the end of the text. */
static void walk(struct slot *st) {
	const u8 *s = st->text;
	u32 i = st->at, n = st->len;
	i32 node = st->node;
	u32 space = st->space;
	while (i < n && node >= 0) {
		u32 c = raw[s[i]];
		if (c < CLASS_RUNE) {
			i++;
			if (space && node != 0) {
				node = next[(u32)node * ncls + spc];
				if (node < 0) break;
			}
			space = 0;
			node = next[(u32)node * ncls + c];
			continue;
		}
		if (c == CLASS_SPACE) { i++; space = 1; continue; }
		if (!full(s + i, n - i)) break; /* a rune split across deltas: wait */
		u32 size, r = decode(s + i, n - i, &size);
		i += size;
		if (uspace(r)) { space = 1; continue; }
		if (r == 0x2018 || r == 0x2019 || r == 0x2bc || r == 0x2032 || r == 0xff07) r = '\'';
		else r = ulower(r);
		if (space && node != 0) {
			node = next[(u32)node * ncls + spc];
			if (node < 0) break;
		}
		space = 0;
		u8 b[4];
		u32 k = put_rune(b, r);
		for (u32 j = 0; j < k && node >= 0; j++) node = next[(u32)node * ncls + cls[b[j]]];
	}
	st->at = i;
	st->node = node;
	st->space = (u8)space;
}

/* part judges one Part record; a payload goes to out. A text delta costs
 * O(delta), whatever the number of phrases. The outcome is refusalcore's:
 * the first phrase in list order the text starts with is a match; else a
 * text that is a prefix of some phrase (a trie node) is a hold; else a
 * divergence. */
static u64 part(struct slot *st, const u8 *rec, u32 len, u8 *out, u32 room) {
	if (len < 12) return RH_FAIL_VERDICT;
	switch (rec[0]) {
	case 1: case 2: case 3:
		return RH_HOLD;
	case 4:
		break;
	default:
		return aside(rec[0]) ? RH_HOLD : RH_DETACH;
	}
	u32 idn = rd32(rec + 4);
	if (idn > len - 12) return RH_FAIL_VERDICT;
	u32 dn = rd32(rec + 8 + idn);
	if (dn > len - 12 - idn) return RH_FAIL_VERDICT;
	/* Only the bytes up to TEXT_CAP are judged: undecided there is a failure. */
	u32 take = dn < TEXT_CAP - st->len ? dn : TEXT_CAP - st->len;
	rh_copy(st->text + st->len, rec + 12 + idn, take);
	st->len += take;
	walk(st);
	i32 node = st->node, k = node >= 0 ? mat[node] : -2 - node;
	if (k < 0 && node >= 0 && take < dn) return RH_FAIL_VERDICT;
	if (k < 0) return node >= 0 ? RH_HOLD : RH_DETACH;
	/* Error record (ABI.md §8.5): a refusal with phrase and text. */
	const u8 *p = phr + phr_off[k];
	u32 pl = phr_len[k], sz = 8 + 4 + 4 + pl + 4 + st->len;
	if (sz > room) return RH_FAIL_VERDICT;
	out[0] = 1; out[1] = 11; out[2] = out[3] = 0;
	wr32(out + 4, 0);
	wr32(out + 8, 0);
	wr32(out + 12, pl);
	rh_copy(out + 16, p, pl);
	wr32(out + 16 + pl, st->len);
	rh_copy(out + 20 + pl, st->text, st->len);
	return (u64)sz << 32 | RH_ERROR;
}

/* final reports whether a verdict ends the stream for the host (ERROR or
 * DETACH: the guest then forgets it, auto_close) or is a failure (after
 * which the host sends the stream nothing more either). */
static int final(u64 v) {
	u32 a = (u32)v;
	return a == RH_ERROR || a == RH_DETACH || v == RH_FAIL_VERDICT;
}

/* A part larger than the scratch buffer (a long delta, such as a whole
 * answer in one) is read with `input` into pages grown for it and kept for
 * the next; a larger one takes fresh pages, at least twice as many (the
 * slots' pages grow memory too, so the two need not be contiguous). */
static u8 *big;
static u32 big_cap;

static const u8 *part_bytes(i32 len) {
	if (len <= RH_BUF_CAP) return rh_buf;
	if ((u32)len > big_cap) {
		u32 want = (u32)len > 2 * big_cap ? (u32)len : 2 * big_cap;
		u32 pages = (want + 65535) / 65536;
		long old = __builtin_wasm_memory_grow(0, pages);
		if (old < 0) return 0;
		big = (u8 *)(old * 65536);
		big_cap = pages * 65536;
	}
	if (rh_input(big, len) != len) return 0;
	return big;
}

RH_EXPORT("retryhost_part") i64 rh_part(i64 h, i32 len) {
	struct slot *st = lookup(h);
	if (!st || len < 0) return (i64)RH_FAIL_VERDICT;
	const u8 *rec = part_bytes(len);
	if (!rec) return (i64)RH_FAIL_VERDICT;
	u64 v = part(st, rec, (u32)len, rh_buf, RH_BUF_CAP);
	if (final(v)) rh_close(h);
	return (i64)v;
}

/* retryhost_open_part (v1.1): open, then the first part at align8(info_len). */
RH_EXPORT("retryhost_open_part") i64 rh_open_part(i64 h, i32 info_len, i32 part_len) {
	if (info_len < 0 || part_len < 0 || (u32)info_len > RH_BUF_CAP) return (i64)RH_FAIL_VERDICT;
	u32 at = ((u32)info_len + 7) & ~7u;
	if (at > RH_BUF_CAP || (u32)part_len > RH_BUF_CAP - at) return (i64)RH_FAIL_VERDICT;
	if (rh_open(h, info_len) != 0) return (i64)RH_FAIL_VERDICT; /* no state kept */
	u64 v = part(lookup(h), rh_buf + at, (u32)part_len, rh_buf, RH_BUF_CAP);
	if (final(v)) rh_close(h);
	return (i64)v;
}

/* retryhost_parts: entries judged in order, results from align8(in_len);
 * it returns the number judged, stopping before an entry whose result might
 * not fit (the host sends the rest again). A stream is forgotten as soon as
 * it is answered ERROR or DETACH; the host ignores the verdicts of its later
 * entries in the batch, which are answered PASS (the host batches only open
 * streams, so a handle not held is one forgotten so). */
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
		u64 v = RH_PASS;
		if (st) {
			v = part(st, rh_buf + off, n, rh_buf + at + 8, RH_BUF_CAP - at - 8);
			if (v == RH_FAIL_VERDICT) return -1;
			if (final(v)) rh_close(h);
		}
		wr64(rh_buf + at, v);
		at += 8 + (u32)(v >> 32);
		off += n;
	}
	return count;
}

RH_EXPORT("retryhost_end") i64 rh_end(i64 h) { return lookup(h) ? RH_PASS : (i64)RH_FAIL_VERDICT; }
