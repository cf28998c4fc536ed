package plugins

import (
	"strconv"
	"strings"

	"github.com/retryhost/retryhost/plugins/refusalcore"
)

// cPhrasesHeader renders c/phrases.h: refusalcore's default phrases as a C
// array, so the C refusal plugin starts from the same list. A test keeps
// the committed file equal to it.
func cPhrasesHeader() string {
	var b strings.Builder
	b.WriteString("/* Generated from refusalcore.DefaultPhrases by the plugins package's tests\n" +
		" * (go test ./plugins -run TestCPhrases -update). DO NOT EDIT. */\n" +
		"static const char *const default_phrases[] = {\n")
	for _, p := range refusalcore.DefaultPhrases() {
		b.WriteString("\t" + strconv.Quote(p) + ",\n")
	}
	b.WriteString("};\n")
	return b.String()
}
