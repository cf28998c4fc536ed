// Command gen writes policy/schema.json (run by go generate in package policy).
package main

import (
	"flag"
	"log"
	"os"

	"github.com/retryhost/retryhost/policy/internal/jsonschema"
)

func main() {
	src := flag.String("src", "schema.go", "the schema's Go source")
	out := flag.String("o", "schema.json", "the file to write")
	flag.Parse()
	data, err := os.ReadFile(*src)
	if err != nil {
		log.Fatal(err)
	}
	schema, err := jsonschema.Generate(data)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, schema, 0o644); err != nil {
		log.Fatal(err)
	}
}
