// Package e2e holds the end-to-end tests of the reference plugins through
// the product's host (and, where noted, the driver). It has no code.
package e2e
