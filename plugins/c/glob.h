/* glob.h: Go's path.Match, ported line for line (the errmatch "model"
 * field): * matches any run of non-/ bytes, ? one rune but /, [...] a
 * class with ranges and ^, \ escapes. A malformed pattern is reported
 * (*bad) as path.ErrBadPattern is: errmatch checks it at load by matching
 * the empty name, as the Go build does. Include after json.h. */
#ifndef RH_GLOB_H
#define RH_GLOB_H

static int glob_esc(const u8 *ch, u32 cn, u32 *ci, u32 *r) {
	u32 i = *ci, size;
	if (i >= cn || ch[i] == '-' || ch[i] == ']') return 0;
	if (ch[i] == '\\') {
		i++;
		if (i >= cn) return 0;
	}
	*r = utf8_next(ch + i, cn - i, &size);
	if (*r == 0xfffd && size == 1) return 0;
	i += size;
	if (i >= cn) return 0;
	*ci = i;
	return 1;
}

/* glob_chunk is matchChunk: it reports whether chunk matches the start of
 * s, with the bytes it took in *took. */
static int glob_chunk(const u8 *ch, u32 cn, const u8 *s, u32 sn, u32 *took, int *bad) {
	int failed = 0;
	u32 si = 0, ci = 0, size;
	while (ci < cn) {
		failed = failed || si == sn;
		switch (ch[ci]) {
		case '[': {
			u32 r = 0;
			if (!failed) {
				r = utf8_next(s + si, sn - si, &size);
				si += size;
			}
			ci++;
			int neg = 0, match = 0;
			if (ci < cn && ch[ci] == '^') { neg = 1; ci++; }
			for (u32 nrange = 0;; nrange++) {
				if (ci < cn && ch[ci] == ']' && nrange > 0) { ci++; break; }
				u32 lo, hi;
				if (!glob_esc(ch, cn, &ci, &lo)) { *bad = 1; return 0; }
				hi = lo;
				if (ch[ci] == '-') {
					ci++;
					if (!glob_esc(ch, cn, &ci, &hi)) { *bad = 1; return 0; }
				}
				match = match || (lo <= r && r <= hi);
			}
			failed = failed || match == neg;
			break;
		}
		case '?':
			if (!failed) {
				failed = s[si] == '/';
				utf8_next(s + si, sn - si, &size);
				si += size;
			}
			ci++;
			break;
		case '\\':
			ci++;
			if (ci == cn) { *bad = 1; return 0; }
			/* fall through */
		default:
			if (!failed) {
				failed = ch[ci] != s[si];
				si++;
			}
			ci++;
		}
	}
	if (failed) return 0;
	*took = si;
	return 1;
}

/* glob_scan is scanChunk: it skips the leading stars and returns the
 * chunk's length. */
static u32 glob_scan(const u8 **p, u32 *pn, int *star) {
	*star = 0;
	while (*pn > 0 && (*p)[0] == '*') { (*p)++; (*pn)--; *star = 1; }
	int inrange = 0;
	for (u32 i = 0; i < *pn; i++) {
		switch ((*p)[i]) {
		case '\\': if (i + 1 < *pn) i++; break;
		case '[': inrange = 1; break;
		case ']': inrange = 0; break;
		case '*': if (!inrange) return i; break;
		}
	}
	return *pn;
}

static int glob_match(const u8 *p, u32 pn, const u8 *name, u32 nn, int *bad) {
	*bad = 0;
	while (pn > 0) {
		int star;
		u32 cl = glob_scan(&p, &pn, &star), took;
		const u8 *chunk = p;
		p += cl;
		pn -= cl;
		if (star && cl == 0) {
			for (u32 i = 0; i < nn; i++)
				if (name[i] == '/') return 0;
			return 1;
		}
		int ok = glob_chunk(chunk, cl, name, nn, &took, bad);
		if (ok && (took == nn || pn > 0)) { name += took; nn -= took; continue; }
		if (*bad) return 0;
		if (star) {
			int found = 0;
			for (u32 i = 0; i < nn && name[i] != '/'; i++) {
				ok = glob_chunk(chunk, cl, name + i + 1, nn - i - 1, &took, bad);
				if (ok) {
					if (pn == 0 && took != nn - i - 1) continue;
					name += i + 1 + took;
					nn -= i + 1 + took;
					found = 1;
					break;
				}
				if (*bad) return 0;
			}
			if (found) continue;
		}
		while (pn > 0) {
			cl = glob_scan(&p, &pn, &star);
			glob_chunk(p, cl, (const u8 *)"", 0, &took, bad);
			if (*bad) return 0;
			p += cl;
			pn -= cl;
		}
		return 0;
	}
	return nn == 0;
}

#endif
