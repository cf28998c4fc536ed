// Command benchcmp reads `go test -bench` output taken in rounds and
// prints what the rounds say, with their spread rather than one number:
//
//	benchcmp compare DIR   per benchmark, head ÷ base per round (base.N.txt
//	                       and head.N.txt in DIR, one file per side and
//	                       round), min / median / max, and each side's median
//	benchcmp doc -doc FILE -stamp TEXT FILE...
//	                       per benchmark, the median and min–max of its
//	                       rounds, written as a Markdown table between the
//	                       markers <!-- bench-doc:begin --> and
//	                       <!-- bench-doc:end --> of FILE
//	benchcmp check FILE... that every generated table is well-formed and
//	                       stamped (the numbers are not checked: machines
//	                       differ)
//
// bench/compare.sh (make bench-compare) and bench/doc.sh (make bench-doc)
// run the benchmarks; this program only reads their output.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "compare":
		err = compareCmd(os.Args[2:], os.Stdout)
	case "doc":
		err = docCmd(os.Args[2:])
	case "check":
		err = checkCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchcmp compare [-max R] DIR | doc -doc FILE -stamp TEXT FILE... | check FILE...")
	os.Exit(2)
}
