package request_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"

	"github.com/llmrate/llmrate/request"
)

// What a chat request asks for, read ahead of the handler that sends it on:
// the handler still reads the whole body.
func Example() {
	body := `{"model":"gpt-4o-mini","max_tokens":100,` +
		`"messages":[{"role":"user","content":"Summarise these notes in three bullet points."}]}`
	r := httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(body))

	request.Prepare(r) // one scan for all three
	model, err := request.Model(r)
	fmt.Println(model, err)
	fmt.Println("estimate:", request.Estimate(r)) // ⌈45 / 4⌉ + 100
	fmt.Println("input:", request.Input(r))       // ⌈45 / 4⌉

	sent, _ := io.ReadAll(r.Body)
	fmt.Println(string(sent) == body)
	// Output:
	// gpt-4o-mini <nil>
	// estimate: 112
	// input: 12
	// true
}

// A body naming its model twice with different values is ambiguous: an
// upstream might use either.
func ExampleModel_ambiguous() {
	r := httptest.NewRequest("POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","MODEL":"gpt-4o"}`))
	_, err := request.Model(r)
	fmt.Println(err == request.ErrAmbiguousModel)

	// No model in the body: a Gemini-style path names it.
	r = httptest.NewRequest("POST", "/v1beta/models/gemini-2.5-flash:generateContent",
		strings.NewReader(`{"contents":[]}`))
	fmt.Println(request.Model(r))
	// Output:
	// true
	// gemini-2.5-flash <nil>
}
