// Command gen writes the capability matrix (see package matrix).
//
//	go run ./tck/matrix/gen -out docs/capabilities.md
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sluicemq/sluice/tck/matrix"
)

func main() {
	out := flag.String("out", "docs/capabilities.md", "file to write")
	flag.Parse()
	if err := os.WriteFile(*out, matrix.Render(matrix.Adapters), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
