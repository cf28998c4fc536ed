// Package doccheck holds the tests that keep the repository's documents
// true: every relative link in a Markdown file resolves to a file and, when
// it names one, a heading; every Go block of the README compiles; the
// README's shell blocks run, and its install block names this tree; the
// README's test command is the one CI runs; its Documentation table lists
// every page of docs/; and it stays within 300 lines. It has no API.
package doccheck
