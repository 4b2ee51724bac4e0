package main

// The demo's HTTP exchanges with the nodes, printed compactly as they
// happen: "> node METHOD path  [headers]  body", then "< status  body" and
// the headers that matter, one a line.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The JSON the demo reads, as api/api.go and admin/ring.go write it.
type (
	dimJSON struct {
		Limit     int64 `json:"limit"`
		Remaining int64 `json:"remaining"`
		ResetMS   int64 `json:"reset_ms"`
	}
	limitsJSON struct {
		Requests    dimJSON `json:"requests"`
		Tokens      dimJSON `json:"tokens"`
		Concurrency dimJSON `json:"concurrency"`
	}
	acquireJSON struct {
		Allowed        bool       `json:"allowed"`
		Lease          string     `json:"lease"`
		ReservedTokens int64      `json:"reserved_tokens"`
		Reason         string     `json:"reason"`
		RetryAfterMS   int64      `json:"retry_after_ms"`
		Limits         limitsJSON `json:"limits"`
		Owner          string     `json:"owner"`
	}
	tenantJSON struct {
		Tenant string     `json:"tenant"`
		Owner  string     `json:"owner"`
		Limits limitsJSON `json:"limits"`
	}
	ringJSON struct {
		Self           string `json:"self"`
		PartitionCount int    `json:"partition_count"`
		Version        string `json:"version"`
		Members        []struct {
			Name       string `json:"name"`
			HTTP       string `json:"http"`
			Partitions int    `json:"partitions"`
		} `json:"members"`
	}
	ownerJSON struct {
		Tenant    string `json:"tenant"`
		Partition int    `json:"partition"`
		Owner     string `json:"owner"`
	}
)

// counts is what a tenant has left, without the resets (which move with
// the clock): what must survive a handoff.
func (l limitsJSON) counts() string {
	return fmt.Sprintf("requests %d/%d, tokens %d/%d, concurrency %d/%d left",
		l.Requests.Remaining, l.Requests.Limit, l.Tokens.Remaining, l.Tokens.Limit,
		l.Concurrency.Remaining, l.Concurrency.Limit)
}

// answer is one HTTP answer, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// httpClient bounds every exchange; a stream is short.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// leaseRE finds leases in bodies, to print them shortened.
var leaseRE = regexp.MustCompile(`"lease":"([^"]{12})[^"]*"`)

// compact is a body as printed: one line, leases shortened.
func compact(b []byte) string {
	s := strings.TrimSpace(string(b))
	return leaseRE.ReplaceAllString(s, `"lease":"$1…"`)
}

// send makes one request to node p and returns the answer, its body read,
// without printing.
func (d *demo) send(p *proc, method, path string, hdr map[string]string, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(d.ctx, method, p.url()+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s%s: %w", method, p.name, path, err)
	}
	return resp, nil
}

// printRequest prints "> node METHOD path  [headers]  body".
func (d *demo) printRequest(p *proc, method, path string, hdr map[string]string, body string) {
	line := fmt.Sprintf("> %s  %s %s", p.name, method, path)
	for _, k := range slices.Sorted(maps.Keys(hdr)) {
		line += fmt.Sprintf("  %s: %s", k, hdr[k])
	}
	if body != "" {
		line += "  " + body
	}
	d.say("%s", line)
}

// call makes one request to node p, prints it and its answer (with the
// headers named in show), and returns the answer.
func (d *demo) call(p *proc, method, path string, hdr map[string]string, body string, show ...string) (answer, error) {
	d.printRequest(p, method, path, hdr, body)
	resp, err := d.send(p, method, path, hdr, body)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("%s %s%s: reading the answer: %w", method, p.name, path, err)
	}
	d.say("< %s  %s", resp.Status, compact(b))
	d.printHeaders(resp.Header, show)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// printHeaders prints the headers named in show that h has, one a line.
func (d *demo) printHeaders(h http.Header, show []string) {
	for _, k := range show {
		if v := h.Get(k); v != "" {
			d.say("    %s: %s", k, v)
		}
	}
}

// getJSON GETs path from node p, printing the exchange, and decodes the
// 200 answer into v.
func (d *demo) getJSON(p *proc, path string, v any) error {
	a, err := d.call(p, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	return decode(a, http.StatusOK, v)
}

// quietJSON GETs path from node p without printing and decodes the 200
// answer into v.
func (d *demo) quietJSON(p *proc, path string, v any) error {
	resp, err := d.send(p, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return decode(answer{status: resp.StatusCode, body: b}, http.StatusOK, v)
}

// decode checks a's status and decodes its body into v.
func decode(a answer, status int, v any) error {
	if a.status != status {
		return fmt.Errorf("want status %d, got %d: %s", status, a.status, compact(a.body))
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		return fmt.Errorf("decoding %s: %w", compact(a.body), err)
	}
	return nil
}

// sseChunk is what the demo reads of an OpenAI stream chunk.
type sseChunk struct {
	Choices []struct {
		Delta        json.RawMessage `json:"delta"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// streamed is what a streamed chat completion brought.
type streamed struct {
	resp                  *http.Response
	text                  string
	done                  bool // [DONE] came
	prompt, completion    int64
	usageSeen, finishSeen bool
}

// stream POSTs a streaming chat completion to node p and prints its SSE
// data lines as they come, each chunk digested to its delta, finish reason
// or usage.
func (d *demo) stream(p *proc, hdr map[string]string, body string, show ...string) (streamed, error) {
	d.printRequest(p, http.MethodPost, "/v1/chat/completions", hdr, body)
	resp, err := d.send(p, http.MethodPost, "/v1/chat/completions", hdr, body)
	if err != nil {
		return streamed{}, err
	}
	defer resp.Body.Close()
	s := streamed{resp: resp}
	d.say("< %s  Content-Type: %s", resp.Status, resp.Header.Get("Content-Type"))
	d.printHeaders(resp.Header, show)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return s, fmt.Errorf("want a 200 stream, got %s: %s", resp.Status, compact(b))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if ok {
			d.say("    data: %s", s.read(data))
		}
	}
	return s, sc.Err()
}

// read takes in one SSE data line and returns its digest.
func (s *streamed) read(data string) string {
	if data == "[DONE]" {
		s.done = true
		return data
	}
	var c sseChunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		return data
	}
	var parts []string
	for _, ch := range c.Choices {
		var delta struct {
			Content string `json:"content"`
		}
		_ = json.Unmarshal(ch.Delta, &delta)
		s.text += delta.Content
		if ch.FinishReason != nil {
			s.finishSeen = true
			parts = append(parts, fmt.Sprintf("finish_reason %q", *ch.FinishReason))
		} else {
			parts = append(parts, "delta "+string(ch.Delta))
		}
	}
	if u := c.Usage; u != nil {
		s.prompt, s.completion, s.usageSeen = u.PromptTokens, u.CompletionTokens, true
		parts = append(parts, fmt.Sprintf(`usage {"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
			u.PromptTokens, u.CompletionTokens, u.TotalTokens))
	}
	return "{chunk: " + strings.Join(parts, ", ") + "}"
}
