// Package doccheck holds the tests that keep the repository's documents
// true: every relative link in a Markdown file resolves to a file and, when
// it names one, a heading; every Go block of the README compiles; the
// README's shell blocks run; and the README's test command is the one CI
// runs. It has no API.
package doccheck
