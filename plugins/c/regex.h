/* regex.h: a linear-time matcher (a Pike VM over a Thompson NFA: no
 * backtracking, time O(text runes × program size)) for the RE2 subset the
 * errmatch plugin accepts. The Go build checks patterns with the same
 * grammar and limits (plugins/internal/cfgrule/re.go) and matches them with
 * Go's regexp, so both builds accept the same patterns and match alike; the
 * differential tests check it. The subset (plugins/README.md):
 *
 *   pattern := ["(?i)"] alt               (?i), only at the start: ignore case
 *   alt     := concat ("|" concat)*
 *   concat  := piece*
 *   piece   := atom [quant ["?"]]         no quant after ^ or $; no a** etc.
 *   quant   := * | + | ? | {n} | {n,} | {n,m}      n <= m <= 1000, no leading 0
 *   atom    := rune | . | ^ | $ | class | escape | "(" alt ")" | "(?:" alt ")"
 *   escape  := \d \D \w \W \s \S | \n \t \r \f \v | \ + ASCII punctuation
 *   class   := "[" ["^"] item+ "]"        - first or last only; no unescaped [
 *   item    := single ["-" single] | \d \D \w \W \s \S
 *
 * A rune is any character but \ . + * ? ( ) | [ { ^ $ (] and } are plain);
 * U+FFFD is refused (Go's regexp finds it inconsistently in invalid UTF-8),
 * and under (?i) so is every non-ASCII rune. Semantics are Go's (Perl
 * flags): ^ and $ are the start and end of the text, . is any rune but \n,
 * \d \w \s are ASCII, a negated class matches \n, (?i) folds as Unicode
 * simple folding (so (?i)k matches U+212A and (?i)s U+017F), and the text is
 * read as UTF-8 with each invalid byte one U+FFFD.
 *
 * Limits: a pattern is at most 512 bytes; its program at most 1000
 * instructions (MAX_PROG, checked as it grows: see re_grow) and all the
 * patterns' together 8192; groups nest at most 32 deep; 4096 class items
 * in all. Include after json.h (it uses utf8_next). */
#ifndef RH_REGEX_H
#define RH_REGEX_H

#define MAX_PATTERN 512
#define MAX_PROG 1000
#define MAX_PROG_TOTAL 8192
#define MAX_DEPTH 32
#define MAX_ITEMS 4096
#define RE_NONE 0xffffffffu

enum { I_CHAR, I_CLASS, I_ANY, I_SPLIT, I_JMP, I_BOL, I_EOL, I_MATCH };
/* class item kinds: a range, or a Perl class (the odd ones negated) */
enum { K_RANGE, K_D, K_ND, K_W, K_NW, K_S, K_NS };

struct inst {
	u8 op, fold;
	u32 x, y; /* CHAR: x rune. CLASS: x first item, y count | negated << 31. SPLIT: x, y. JMP: x */
};
struct item {
	u32 lo, hi;
	u8 kind;
};

static struct inst prog[MAX_PROG_TOTAL];
static u32 nprog;
static struct item items[MAX_ITEMS];
static u32 nitems;

/* the pattern being compiled */
static struct {
	const u8 *p;
	u32 n, i, start;
	u8 fold;
	const char *err;
} R;

static int re_fail(const char *m) {
	if (!R.err) R.err = m;
	return 0;
}

/* re_grow checks that k more instructions fit: the program so far
 * (without its final MATCH) may never pass MAX_PROG - 1. */
static int re_grow(u32 k) {
	if (nprog - R.start + k > MAX_PROG - 1) return re_fail("compiles to over 1000 instructions");
	if (nprog + k > MAX_PROG_TOTAL - 1) return re_fail("the patterns compile to over 8192 instructions in all");
	return 1;
}

static int emit(u8 op, u32 x, u32 y) {
	if (!re_grow(1)) return 0;
	prog[nprog].op = op;
	prog[nprog].fold = R.fold;
	prog[nprog].x = x;
	prog[nprog].y = y;
	nprog++;
	return 1;
}

static void reloc(struct inst *in, u32 from, i32 by) {
	if (in->op == I_JMP || in->op == I_SPLIT) {
		if (in->x != RE_NONE && in->x >= from) in->x = (u32)((i32)in->x + by);
		if (in->op == I_SPLIT && in->y != RE_NONE && in->y >= from) in->y = (u32)((i32)in->y + by);
	}
}

/* shift opens k slots at a, moving the fragment [a, nprog) up. */
static int shift(u32 a, u32 k) {
	if (!re_grow(k)) return 0;
	__builtin_memmove(prog + a + k, prog + a, (nprog - a) * sizeof prog[0]);
	nprog += k;
	for (u32 i = a + k; i < nprog; i++) reloc(&prog[i], a, (i32)k);
	return 1;
}

static int re_end(void) { return R.i >= R.n; }

static u32 re_rune(void) {
	u32 size, r = utf8_next(R.p + R.i, R.n - R.i, &size);
	R.i += size;
	return r;
}

static int is_punct(u8 c) {
	return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

static int perl_kind(u8 c) {
	switch (c) {
	case 'd': return K_D;
	case 'D': return K_ND;
	case 'w': return K_W;
	case 'W': return K_NW;
	case 's': return K_S;
	case 'S': return K_NS;
	}
	return -1;
}

static int ctrl_escape(u8 c) {
	switch (c) {
	case 'n': return '\n';
	case 't': return '\t';
	case 'r': return '\r';
	case 'f': return '\f';
	case 'v': return '\v';
	}
	return -1;
}

static int add_item(u32 lo, u32 hi, u8 kind) {
	if (nitems == MAX_ITEMS) return re_fail("the patterns have over 4096 class items in all");
	items[nitems].lo = lo;
	items[nitems].hi = hi;
	items[nitems].kind = kind;
	nitems++;
	return 1;
}

/* literal_rune checks a rune written as itself. */
static int literal_rune(u32 r) {
	if (r == 0xfffd) return re_fail("U+FFFD is not in the subset");
	if (R.fold && r >= 0x80) return re_fail("(?i) applies to ASCII only: a non-ASCII rune is not in the subset");
	return 1;
}

/* class_single reads a class member that can end a range. */
static int class_single(u32 *r) {
	if (re_end()) return re_fail("missing ]");
	u8 c = R.p[R.i];
	if (c == '[') return re_fail("[ in a class: escape it");
	if (c == '-') return re_fail("- in a class: put it first or last, or escape it");
	if (c == ']') return re_fail("bad class range");
	if (c == '\\') {
		if (R.i + 1 >= R.n) return re_fail("trailing \\");
		u8 e = R.p[R.i + 1];
		int k = ctrl_escape(e);
		R.i += 2;
		if (k >= 0) { *r = (u32)k; return 1; }
		if (is_punct(e)) { *r = e; return 1; }
		return re_fail("an escape not in the subset");
	}
	*r = re_rune();
	return literal_rune(*r);
}

static NOINLINE int parse_class(void) {
	R.i++; /* [ */
	u32 neg = 0, first = nitems, count = 0;
	if (!re_end() && R.p[R.i] == '^') { neg = 1; R.i++; }
	for (;;) {
		if (re_end()) return re_fail("missing ]");
		u8 c = R.p[R.i];
		if (c == ']') {
			if (count == 0) return re_fail("empty class");
			R.i++;
			break;
		}
		if (c == '-' && (count == 0 || (R.i + 1 < R.n && R.p[R.i + 1] == ']'))) {
			R.i++;
			if (!add_item('-', '-', K_RANGE)) return 0;
			count++;
			continue;
		}
		if (c == '\\' && R.i + 1 < R.n && perl_kind(R.p[R.i + 1]) >= 0) {
			if (!add_item(0, 0, (u8)perl_kind(R.p[R.i + 1]))) return 0;
			R.i += 2;
			if (!re_end() && R.p[R.i] == '-' && R.i + 1 < R.n && R.p[R.i + 1] != ']') return re_fail("bad class range");
			count++;
			continue;
		}
		u32 lo, hi;
		if (!class_single(&lo)) return 0;
		hi = lo;
		if (!re_end() && R.p[R.i] == '-' && R.i + 1 < R.n && R.p[R.i + 1] != ']') {
			R.i++;
			if (!class_single(&hi)) return 0;
			if (hi < lo) return re_fail("bad class range");
		}
		if (!add_item(lo, hi, K_RANGE)) return 0;
		count++;
	}
	return emit(I_CLASS, first, count | neg << 31);
}

/* repeat rewrites the fragment [a, nprog) as x{lo,hi} (hi == RE_NONE: no
 * upper bound): lo copies, then x* or hi-lo copies of x?. */
static struct inst tmp[MAX_PROG];
static NOINLINE int repeat(u32 a, u32 lo, u32 hi) {
	u32 s = nprog - a;
	u64 size = (u64)lo * s + (hi == RE_NONE ? s + 2 : (u64)(hi - lo) * (s + 1));
	nprog = a; /* the fragment is rebuilt from tmp */
	if (size > s && !re_grow((u32)(size > MAX_PROG ? MAX_PROG : size))) return 0;
	for (u32 k = 0; k < s; k++) tmp[k] = prog[a + k];
	for (u32 c = 0; c < lo; c++) {
		for (u32 k = 0; k < s; k++) { prog[nprog + k] = tmp[k]; reloc(&prog[nprog + k], a, (i32)(nprog - a)); }
		nprog += s;
	}
	if (hi == RE_NONE) {
		u32 l = nprog;
		emit(I_SPLIT, l + 1, l + s + 2);
		for (u32 k = 0; k < s; k++) { prog[nprog + k] = tmp[k]; reloc(&prog[nprog + k], a, (i32)(nprog - a)); }
		nprog += s;
		emit(I_JMP, l, 0);
	} else {
		for (u32 c = lo; c < hi; c++) {
			u32 l = nprog;
			emit(I_SPLIT, l + 1, l + 1 + s);
			for (u32 k = 0; k < s; k++) { prog[nprog + k] = tmp[k]; reloc(&prog[nprog + k], a, (i32)(nprog - a)); }
			nprog += s;
		}
	}
	return 1;
}

static int parse_count(u32 *v) {
	u32 b = R.i, x = 0;
	while (!re_end() && R.p[R.i] >= '0' && R.p[R.i] <= '9') {
		x = x * 10 + (R.p[R.i] - '0');
		R.i++;
		if (R.i - b > 4) return 0;
	}
	if (R.i == b || (R.i - b > 1 && R.p[b] == '0') || x > 1000) return 0;
	*v = x;
	return 1;
}

static int parse_alt(u32 depth);

static NOINLINE int parse_piece(u32 depth) {
	u32 a = nprog;
	int anchor = 0;
	u8 c = R.p[R.i];
	switch (c) {
	case '(':
		R.i++;
		if (!re_end() && R.p[R.i] == '?') {
			if (R.i + 1 < R.n && R.p[R.i + 1] == ':') R.i += 2;
			else return re_fail("(? groups other than (?: and a leading (?i) are not in the subset");
		}
		if (depth + 1 > MAX_DEPTH) return re_fail("groups nest over 32 deep");
		if (!parse_alt(depth + 1)) return 0;
		if (re_end() || R.p[R.i] != ')') return re_fail("missing )");
		R.i++;
		break;
	case '.':
		R.i++;
		if (!emit(I_ANY, 0, 0)) return 0;
		break;
	case '^':
	case '$':
		R.i++;
		anchor = 1;
		if (!emit(c == '^' ? I_BOL : I_EOL, 0, 0)) return 0;
		break;
	case '[':
		if (!parse_class()) return 0;
		break;
	case '*': case '+': case '?': case '{':
		return re_fail("missing argument to repetition operator");
	case '\\': {
		if (R.i + 1 >= R.n) return re_fail("trailing \\");
		u8 e = R.p[R.i + 1];
		int k = perl_kind(e), ce = ctrl_escape(e);
		R.i += 2;
		if (k >= 0) {
			if (!add_item(0, 0, (u8)k) || !emit(I_CLASS, nitems - 1, 1)) return 0;
		} else if (ce >= 0) {
			if (!emit(I_CHAR, (u32)ce, 0)) return 0;
		} else if (is_punct(e)) {
			if (!emit(I_CHAR, e, 0)) return 0;
		} else {
			return re_fail("an escape not in the subset");
		}
		break;
	}
	default: {
		u32 r = re_rune();
		if (!literal_rune(r) || !emit(I_CHAR, r, 0)) return 0;
	}
	}
	if (re_end()) return 1;
	c = R.p[R.i];
	u32 lo, hi;
	switch (c) {
	case '*': lo = 0; hi = RE_NONE; R.i++; break;
	case '+': lo = 1; hi = RE_NONE; R.i++; break;
	case '?': lo = 0; hi = 1; R.i++; break;
	case '{':
		R.i++;
		if (!parse_count(&lo)) return re_fail("bad repetition {n,m}");
		hi = lo;
		if (!re_end() && R.p[R.i] == ',') {
			R.i++;
			hi = RE_NONE;
			if (!re_end() && R.p[R.i] != '}' && !parse_count(&hi)) return re_fail("bad repetition {n,m}");
		}
		if (re_end() || R.p[R.i] != '}' || (hi != RE_NONE && hi < lo)) return re_fail("bad repetition {n,m}");
		R.i++;
		break;
	default:
		return 1;
	}
	if (anchor) return re_fail("repetition of ^ or $ is not in the subset");
	if (!re_end() && R.p[R.i] == '?') R.i++; /* non-greedy: the same yes or no */
	if (!re_end() && (R.p[R.i] == '*' || R.p[R.i] == '+' || R.p[R.i] == '?' || R.p[R.i] == '{'))
		return re_fail("invalid nested repetition operator");
	if (hi == RE_NONE && lo <= 1) {
		/* x* and x+ in place (as repeat would, with the same sizes) */
		if (lo == 0) {
			if (!shift(a, 1)) return 0;
			prog[a].op = I_SPLIT;
			prog[a].fold = 0;
			prog[a].x = a + 1;
			if (!emit(I_JMP, a, 0)) return 0;
			prog[a].y = nprog;
		} else if (!emit(I_SPLIT, a, nprog + 1)) {
			return 0;
		}
		return 1;
	}
	return repeat(a, lo, hi);
}

static int parse_alt(u32 depth) {
	u32 a = nprog, jmps = RE_NONE;
	for (;;) {
		while (!re_end() && R.p[R.i] != '|' && R.p[R.i] != ')')
			if (!parse_piece(depth)) return 0;
		if (re_end() || R.p[R.i] != '|') break;
		R.i++;
		/* SPLIT branch, rest; branch; JMP end; rest... */
		if (!shift(a, 1)) return 0;
		prog[a].op = I_SPLIT;
		prog[a].fold = 0;
		prog[a].x = a + 1;
		if (!emit(I_JMP, jmps, 0)) return 0;
		jmps = nprog - 1;
		prog[a].y = nprog;
		a = nprog;
	}
	while (jmps != RE_NONE) {
		u32 next = prog[jmps].x;
		prog[jmps].x = nprog;
		jmps = next;
	}
	return 1;
}

/* re_compile compiles p[0:n] and returns its first instruction, or RE_NONE
 * with the reason in *why. */
static u32 re_compile(const u8 *p, u32 n, const char **why) {
	R.p = p;
	R.n = n;
	R.i = 0;
	R.fold = 0;
	R.err = 0;
	R.start = nprog;
	if (n > MAX_PATTERN) { *why = "longer than 512 bytes"; return RE_NONE; }
	if (n >= 4 && p[0] == '(' && p[1] == '?' && p[2] == 'i' && p[3] == ')') { R.fold = 1; R.i = 4; }
	if (parse_alt(0) && !re_end()) re_fail("unmatched )");
	if (!R.err) {
		prog[nprog].op = I_MATCH;
		prog[nprog].x = prog[nprog].y = 0;
		nprog++;
	}
	if (R.err) {
		*why = R.err;
		nprog = R.start;
		return RE_NONE;
	}
	return R.start;
}

/* ---- matching ---- */

static u32 ascii_lower(u32 r) { return r >= 'A' && r <= 'Z' ? r + 32 : r; }

/* fold_in reports whether some rune of r's simple-fold orbit is in [lo, hi]
 * (lo, hi ASCII under (?i)): only ASCII letters and U+017F, U+212A have
 * ASCII in their orbits. */
static int fold_in(u32 r, u32 lo, u32 hi) {
	u32 a, b;
	if (r == 0x17f) a = 's', b = 'S';
	else if (r == 0x212a) a = 'k', b = 'K';
	else if (r < 0x80) {
		a = r;
		b = ascii_lower(r) != r ? ascii_lower(r) : (r >= 'a' && r <= 'z' ? r - 32 : r);
	} else return r >= lo && r <= hi;
	return (a >= lo && a <= hi) || (b >= lo && b <= hi);
}

static int perl_has(u8 base, u32 r, u8 fold) {
	switch (base) {
	case K_D: return r >= '0' && r <= '9';
	case K_S: return r == '\t' || r == '\n' || r == '\f' || r == '\r' || r == ' ';
	default: /* K_W */
		if (fold && (r == 0x17f || r == 0x212a)) return 1;
		return (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || r == '_';
	}
}

static int item_has(const struct item *it, u32 r, u8 fold) {
	switch (it->kind) {
	case K_RANGE: return fold ? fold_in(r, it->lo, it->hi) : r >= it->lo && r <= it->hi;
	case K_D: case K_W: case K_S: return perl_has(it->kind, r, fold);
	default: return !perl_has((u8)(it->kind - 1), r, fold);
	}
}

static int step(const struct inst *in, u32 r) {
	switch (in->op) {
	case I_CHAR: return in->fold ? fold_in(r, in->x, in->x) : r == in->x;
	case I_ANY: return r != '\n';
	case I_CLASS: {
		u32 n = in->y & 0x7fffffff;
		int hit = 0;
		for (u32 k = 0; k < n && !hit; k++) hit = item_has(&items[in->x + k], r, in->fold);
		return hit != (int)(in->y >> 31);
	}
	}
	return 0;
}

static u32 mark[MAX_PROG_TOTAL], stamp;
static u32 lists[2][MAX_PROG], nlist[2];
static u32 stk[2 * MAX_PROG + 2];

/* add follows the empty transitions from pc at text position pos (of n)
 * into list l; it returns 1 when it reaches MATCH. */
static int add(u32 l, u32 pc, u32 pos, u32 n) {
	u32 sp = 0;
	stk[sp++] = pc;
	while (sp) {
		pc = stk[--sp];
		if (mark[pc] == stamp) continue;
		mark[pc] = stamp;
		const struct inst *in = &prog[pc];
		switch (in->op) {
		case I_MATCH: return 1;
		case I_JMP: stk[sp++] = in->x; break;
		case I_SPLIT: stk[sp++] = in->y; stk[sp++] = in->x; break;
		case I_BOL: if (pos == 0) stk[sp++] = pc + 1; break;
		case I_EOL: if (pos == n) stk[sp++] = pc + 1; break;
		default: lists[l][nlist[l]++] = pc;
		}
	}
	return 0;
}

static void next_stamp(void) {
	if (++stamp == 0) {
		for (u32 k = 0; k < MAX_PROG_TOTAL; k++) mark[k] = 0;
		stamp = 1;
	}
}

/* re_match reports whether the program at start matches anywhere in
 * s[0:n] (Go's Regexp.Match). */
static int re_match(u32 start, const u8 *s, u32 n) {
	u32 cur = 0, pos = 0;
	nlist[0] = nlist[1] = 0;
	next_stamp();
	for (;;) {
		if (add(cur, start, pos, n)) return 1;
		if (pos >= n) return 0;
		u32 size, r = utf8_next(s + pos, n - pos, &size);
		u32 nx = cur ^ 1;
		nlist[nx] = 0;
		next_stamp();
		for (u32 k = 0; k < nlist[cur]; k++) {
			u32 pc = lists[cur][k];
			if (step(&prog[pc], r) && add(nx, pc + 1, pos + size, n)) return 1;
		}
		nlist[cur] = 0;
		cur = nx;
		pos += size;
	}
}

#endif
