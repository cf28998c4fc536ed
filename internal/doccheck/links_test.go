package doccheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's top directory, two floors up from here.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the repository root")
	return root
}

// markdownFiles lists the Markdown files of the repository: those git
// tracks, plus any new ones not yet added (so a page is checked before its
// first commit). Without git it walks the tree.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md")
	cmd.Dir = root
	out, err := cmd.Output()
	var files []string
	if err == nil {
		for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f == "" {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, f)); err == nil { // deleted but not yet staged
				files = append(files, f)
			}
		}
		return files
	}
	require.NoError(t, filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	}))
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
)

// prose returns the lines of a Markdown text outside fenced code blocks,
// with inline code removed, numbered from 1.
func prose(text string) map[int]string {
	lines := map[int]string{}
	in := false
	for i, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if !in {
			lines[i+1] = inlineCode.ReplaceAllString(l, "")
		}
	}
	return lines
}

// slug is GitHub's anchor for a heading: lower case, punctuation but
// hyphens and underscores dropped, each space a hyphen.
func slug(h string) string {
	h = inlineCode.ReplaceAllStringFunc(h, func(s string) string { return strings.Trim(s, "`") })
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1") // a link's text
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127 && isLetterOrDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetterOrDigit(r rune) bool {
	return strings.ContainsRune("àáâäçèéêëìíîïñòóôöùúûüß", r) || (r >= 'α' && r <= 'ω')
}

// anchors returns the anchors a Markdown text defines: a slug per heading
// (GitHub numbers repeated ones -1, -2 …) and explicit <a name> / <a id>.
func anchors(text string) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			set[m[1]] = true
		}
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			set[s+"-"+itoa(n)] = true
		} else {
			set[s] = true
		}
		seen[s]++
	}
	return set
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// TestMarkdownLinksResolve: every relative link in every Markdown file of
// the repository names a file or directory that exists, and an anchor that
// a heading of its target defines. Links to the web are not followed.
func TestMarkdownLinksResolve(t *testing.T) {
	root := repoRoot(t)
	files := markdownFiles(t, root)
	require.Contains(t, files, "README.md")
	texts := map[string]string{}
	read := func(rel string) string {
		if s, ok := texts[rel]; ok {
			return s
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		require.NoError(t, err)
		texts[rel] = string(b)
		return texts[rel]
	}
	checked := 0
	for _, f := range files {
		lines := prose(read(f))
		for n, l := range lines {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				rel := f
				if path != "" {
					rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
					if strings.HasPrefix(rel, "../") {
						t.Errorf("%s:%d: %s leaves the repository", f, n, target)
						continue
					}
					st, err := os.Stat(filepath.Join(root, rel))
					if err != nil {
						t.Errorf("%s:%d: %s does not exist", f, n, target)
						continue
					}
					if st.IsDir() || !strings.HasSuffix(rel, ".md") {
						if anchor != "" {
							t.Errorf("%s:%d: %s: an anchor into a file that is not Markdown", f, n, target)
						}
						continue
					}
				}
				if anchor != "" && !anchors(read(rel))[anchor] {
					t.Errorf("%s:%d: %s: %s has no heading #%s", f, n, target, rel, anchor)
				}
			}
		}
	}
	require.Greater(t, checked, 50, "the links were found")
}

// The slug rule is what GitHub renders; pin it on the headings this
// repository uses, punctuation and code included.
func TestSlug(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Plugins from an OCI registry", "plugins-from-an-oci-registry"},
		{"Why does `Model.Stream` make the HTTP request before returning?", "why-does-modelstream-make-the-http-request-before-returning"},
		{"Gateway (retryhost serve, package gateway)", "gateway-retryhost-serve-package-gateway"},
		{"The built-in plugins' configs", "the-built-in-plugins-configs"},
		{"Shared state: cooldowns, sticky fallbacks", "shared-state-cooldowns-sticky-fallbacks"},
	} {
		require.Equal(t, tc.want, slug(tc.in), tc.in)
	}
	a := anchors("# A\n\n## A\n\n```\n# not a heading\n```\n<a name=\"x\"></a>\n")
	require.Equal(t, map[string]bool{"a": true, "a-1": true, "x": true}, a)
}
