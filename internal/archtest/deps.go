// Package archtest holds the test that enforces the layering of DESIGN.md.
package archtest
