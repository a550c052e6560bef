package llmrate_test

import (
	"os"
	"regexp"
	"testing"
)

// TestDocsCiteExistingFiles: every file of bench/ that README.md and
// BENCHMARKS.md cite as the evidence of a figure is in the repository, so
// that a reader can check the figure.
func TestDocsCiteExistingFiles(t *testing.T) {
	cite := regexp.MustCompile(`bench/[A-Za-z0-9_./-]+\.(?:txt|sh|go)`)
	for _, doc := range []string{"README.md", "BENCHMARKS.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range cite.FindAllString(string(b), -1) {
			if seen[p] {
				continue
			}
			seen[p] = true
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s cites %s, which is not in the repository: %v", doc, p, err)
			}
		}
		if len(seen) == 0 {
			t.Errorf("%s cites no bench/ file: the pattern is stale", doc)
		}
	}
}
