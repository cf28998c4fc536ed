// Package archtest holds the tests that enforce the layering described in
// docs/architecture.md: the floors, which package may import which, and
// which third-party clients each package may link. It has no API.
package archtest
