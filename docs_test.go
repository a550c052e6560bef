package llmrate_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocsCiteExistingFiles: every file of bench/ that README.md,
// BENCHMARKS.md, RELIABILITY.md and the rounds' history (bench/*.md) cite
// as the evidence of a figure is in the repository, so that a reader can
// check the figure. (The README cites none: its figures are BENCHMARKS.md's.)
func TestDocsCiteExistingFiles(t *testing.T) {
	cite := regexp.MustCompile(`bench/[A-Za-z0-9_./-]+\.(?:txt|sh|go)`)
	history, err := filepath.Glob("bench/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"README.md", "BENCHMARKS.md", "RELIABILITY.md"}, history...) {
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
		if len(seen) == 0 && doc == "BENCHMARKS.md" {
			t.Errorf("%s cites no bench/ file: the pattern is stale", doc)
		}
	}
}

// TestDocsRelativeLinksResolve: every relative Markdown link in README.md,
// BENCHMARKS.md, RELIABILITY.md, docs/*.md and bench/*.md (the rounds'
// history) points at a file or folder of the repository (a moved guide
// must not leave a dead link behind), and every anchor of such a link, or
// of an in-page link, names a heading of its page (a renamed section must
// not either). Absolute URLs are not checked.
func TestDocsRelativeLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	docs := []string{"README.md", "BENCHMARKS.md", "RELIABILITY.md"}
	guides, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, guides...)
	history, err := filepath.Glob("bench/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, history...)
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			p := doc
			if target != "" {
				p = filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s links to %s, which is not in the repository: %v", doc, m[1], err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(p, ".md") && !headingAnchors(t, p)[anchor] {
				t.Errorf("%s links to %s: %s has no heading with that anchor", doc, m[1], p)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the pattern is stale")
	}
}

// TestDocsReadmeCodeIsTested: every Go block of README.md is, verbatim, part
// of a file of examples/quickstart (main.go, plans.go), which builds and has
// its own test, so the README's examples cannot rot.
func TestDocsReadmeCodeIsTested(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range []string{"examples/quickstart/main.go", "examples/quickstart/plans.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	block := regexp.MustCompile("(?s)```go\n(.*?)```")
	blocks := block.FindAllSubmatch(readme, -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go block: the pattern is stale")
	}
	for _, b := range blocks {
		if !strings.Contains(string(src), string(b[1])) {
			t.Errorf("README.md's Go block is not in examples/quickstart:\n%s", b[1])
		}
	}
}

// headingAnchors returns the anchors GitHub gives the headings of the
// Markdown file at path: the heading's text lower-cased, spaces as
// hyphens, every character but letters, digits, hyphens and underscores
// dropped, a repeated one suffixed -1, -2, …; headings inside code fences
// are not headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		text, ok := strings.CutPrefix(line, "#")
		if fenced || !ok {
			continue
		}
		text = strings.TrimSpace(strings.TrimLeft(text, "#"))
		var a strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				a.WriteRune(r)
			}
		}
		id := a.String()
		if n := seen[id]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			anchors[id] = true
		}
		seen[id]++
	}
	return anchors
}
