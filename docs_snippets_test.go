package llmrate_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// snippetImports are the packages a documentation block may use without
// importing them: a block that names one (as in llmrate.New) gets its
// import. The import path of an llmrate package is its module path; a
// block needing another package imports it itself (a whole file does).
var snippetImports = map[string]string{
	"llmrate":     "github.com/llmrate/llmrate",
	"llmratetest": "github.com/llmrate/llmrate/llmratetest",
	"redisstore":  "github.com/llmrate/llmrate/redisstore",
	"request":     "github.com/llmrate/llmrate/request",
	"upstream":    "github.com/llmrate/llmrate/upstream",
	"usage":       "github.com/llmrate/llmrate/usage",
	"redis":       "github.com/redis/go-redis/v9",
	"zap":         "go.uber.org/zap",
	"chi":         "github.com/go-chi/chi/v5",
	"mux":         "github.com/gorilla/mux",
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"httputil":    "net/http/httputil",
	"io":          "io",
	"json":        "encoding/json",
	"log":         "log",
	"math":        "math",
	"os":          "os",
	"slog":        "log/slog",
	"strconv":     "strconv",
	"strings":     "strings",
	"sync":        "sync",
	"testing":     "testing",
	"time":        "time",
	"url":         "net/url",
}

// snippetGiven is what every documentation block may use without
// declaring it: the names a guide's prose introduces (your handler, your
// store, the limiter built in an earlier block), each with its type. A
// block's own declaration of one shadows it (or, at the top level,
// replaces it). A block needing more says so in an HTML comment on the
// line before its fence: <!-- snippet: Go declarations -->.
var snippetGiven = [][2]string{
	{"lim", "*llmrate.Limiter"},                // the limiter of an earlier block
	{"proxy", "http.Handler"},                  // your handler: the provider behind the limiter
	{"resp", "*http.Response"},                 // a client's response
	{"metrics", "llmrate.Observer"},            // your observer
	{"store", "llmrate.Store"},                 // a store: the memory store or a redisstore.Store
	{"workspaceOf", "llmrate.Extractor"},       // your authentication layer's workspace of a request
	{"setAnthropicKey", "func(*http.Request)"}, // docs/upstream.md's key setters
	{"setGeminiKey", "func(*http.Request)"},
}

// givenSource is snippetGiven as a file of package snippet, less the
// names in declared.
func givenSource(declared []string) string {
	src := "package snippet\n\nimport (\n\t\"net/http\"\n\n\t\"github.com/llmrate/llmrate\"\n)\n\n"
	src += "var _ http.Handler\nvar _ llmrate.Limits\n\n"
	for _, g := range snippetGiven {
		if !slices.Contains(declared, g[0]) {
			src += fmt.Sprintf("var %s %s\n\nvar _ = %s\n\n", g[0], g[1], g[0])
		}
	}
	return src
}

// docBlock is one Go block of a documentation page.
type docBlock struct {
	doc   string // the page, relative to the repository root
	line  int    // the line of the block's first line of code
	code  string
	given string // declarations from the block's snippet comment
}

// docGoBlocks returns every ```go block of README.md and docs/*.md.
func docGoBlocks(t *testing.T) []docBlock {
	t.Helper()
	docs, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md"}, docs...)
	given := regexp.MustCompile(`^<!--\s*snippet:\s*(.*?)\s*-->$`)
	var blocks []docBlock
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) != "```go" {
				continue
			}
			blk := docBlock{doc: filepath.ToSlash(doc), line: i + 2}
			if i > 0 {
				if m := given.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
					blk.given = m[1]
				}
			}
			var code []string
			for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
				code = append(code, lines[i])
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: a Go block that never ends", doc, blk.line-1)
			}
			blk.code = strings.Join(code, "\n") + "\n"
			blocks = append(blocks, blk)
		}
	}
	return blocks
}

// snippetSource makes a block a Go file of package snippet: a whole file
// (package main) as it is; declarations (func, type, var, const) with the
// imports they use; statements inside a function, with each name they
// declare at the top level used once, so that a block may end on a
// declaration as a reader's code would go on to use it. //line
// directives make the compiler report a doc's own lines. declared is what
// the file declares at its top level, which snippetGiven must not.
func snippetSource(b docBlock) (src string, declared []string, err error) {
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		return fmt.Sprintf("//line %s:%d\n%s", b.doc, b.line, b.code), nil, nil
	}
	fset := token.NewFileSet()
	given, err := parser.ParseFile(fset, "", "package snippet\n"+b.given, 0)
	if err != nil {
		return "", nil, fmt.Errorf("%s:%d: the snippet comment is not Go declarations: %v", b.doc, b.line-1, err)
	}
	declared = declNames(given)
	var body string
	if f, err := parser.ParseFile(fset, "", "package snippet\n"+b.code, 0); err == nil {
		body = fmt.Sprintf("//line %s:%d\n%s", b.doc, b.line, b.code)
		declared = append(declared, declNames(f)...)
	} else {
		wrapped := "package snippet\nfunc _() {\n" + b.code + "}\n"
		f, err := parser.ParseFile(fset, "", wrapped, 0)
		if err != nil {
			return "", nil, fmt.Errorf("%s:%d: neither declarations nor statements: %v", b.doc, b.line, err)
		}
		var uses []string
		for _, name := range topLevelNames(f) {
			uses = append(uses, "_ = "+name)
		}
		body = fmt.Sprintf("func _() {\n//line %s:%d\n%s\t%s\n}\n", b.doc, b.line, b.code, strings.Join(uses, "; "))
	}
	var imports []string
	for _, path := range usedPackages(b.given + "\n" + b.code) {
		imports = append(imports, fmt.Sprintf("\t%q", path))
	}
	src = "package snippet\n\nimport (\n" + strings.Join(imports, "\n") + "\n)\n\n"
	if b.given != "" {
		src += b.given + "\n\n"
	}
	return src + body, declared, nil
}

// declNames returns the names f declares at its top level.
func declNames(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names = append(names, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, id := range s.Names {
						names = append(names, id.Name)
					}
				case *ast.TypeSpec:
					names = append(names, s.Name.Name)
				}
			}
		}
	}
	return names
}

// usedPackages returns the import paths of the snippetImports a block
// names as pkg.Name, outside comments and strings.
func usedPackages(code string) []string {
	var s scanner.Scanner
	fset := token.NewFileSet()
	src := []byte(code)
	s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
	var paths []string
	prev, prevIdent := token.ILLEGAL, ""
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if tok == token.PERIOD && prev == token.IDENT {
			if p, ok := snippetImports[prevIdent]; ok && !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
		if tok == token.IDENT && prev == token.PERIOD {
			tok = token.ILLEGAL // a field or method, never a package
		}
		prev, prevIdent = tok, lit
	}
	slices.Sort(paths)
	return paths
}

// TestDocsGoBlocksCompile: every Go block of README.md and docs/*.md
// compiles against the code as it is, each as a package of its own in a
// module that uses this checkout, so that no guide shows an option, a
// field or a signature the code no longer has. Fragments are wrapped as
// snippetSource says; the names they take as given are in snippetGiven
// or in the block's <!-- snippet: ... --> comment.
func TestDocsGoBlocksCompile(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on the PATH:", err)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	blocks := docGoBlocks(t)
	if len(blocks) < 10 {
		t.Fatalf("found %d Go blocks in the docs: the pattern is stale", len(blocks))
	}
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	// The module requires what the root does, and the root itself from
	// this checkout, so that a block builds from the root's go.sum alone.
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(gomod, []byte("module snippets"))
	mod = append(mod, fmt.Sprintf("\nrequire github.com/llmrate/llmrate v0.0.0\n\nreplace github.com/llmrate/llmrate => %s\n", root)...)
	dir := t.TempDir()
	write := func(name string, b []byte) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", mod)
	write("go.sum", sum)
	for i, b := range blocks {
		src, declared, err := snippetSource(b)
		if err != nil {
			t.Error(err)
			continue
		}
		pkg := fmt.Sprintf("b%02d", i)
		write(filepath.Join(pkg, "snippet.go"), []byte(src))
		if !strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
			write(filepath.Join(pkg, "given.go"), []byte(givenSource(declared)))
		}
	}
	cmd := exec.Command(goTool, "build", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("the docs' Go blocks do not compile (%v):\n%s", err, out.String())
	}
}

// topLevelNames returns the names the statements of f's one function
// declare at their top level (x := …, var x …), "_" left out.
func topLevelNames(f *ast.File) []string {
	var names []string
	add := func(id *ast.Ident) {
		if id.Name != "_" && !slices.Contains(names, id.Name) {
			names = append(names, id.Name)
		}
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		for _, st := range fn.Body.List {
			switch st := st.(type) {
			case *ast.AssignStmt:
				if st.Tok == token.DEFINE {
					for _, e := range st.Lhs {
						if id, ok := e.(*ast.Ident); ok {
							add(id)
						}
					}
				}
			case *ast.DeclStmt:
				if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
					for _, s := range g.Specs {
						for _, id := range s.(*ast.ValueSpec).Names {
							add(id)
						}
					}
				}
			}
		}
	}
	return names
}
