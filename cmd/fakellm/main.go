// Command fakellm serves the fake LLM provider of the tests
// (test/fakeupstream) on an address of its own, so that a tokenringd can be
// pointed at it without an API account: OpenAI's POST /v1/chat/completions,
// /v1/responses and /v1/embeddings and GET /v1/models, and Anthropic's POST
// /v1/messages and /v1/messages/count_tokens; whole answers and SSE streams
// in each API's event sequence, with the usage given by the flags (OpenAI's
// usage-only chunk when the request asks for stream_options.include_usage).
//
//	fakellm -addr 127.0.0.1:9000 -prompt-tokens 12 -completion-tokens 3
//
// Its first line on stdout is "fakellm: serving http://ADDR/v1" (with the
// port chosen when -addr asks for port 0); it logs one line per request on
// stderr as it arrives ("fakellm: POST /v1/messages") and stops on SIGINT
// or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tokenring/tokenring/test/fakeupstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

// options are fakellm's command line.
type options struct {
	addr, apiKey, text string
	reply              fakeupstream.UpstreamReply
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fakellm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9000", "`addr` to serve on (port 0: any free port, printed)")
	fs.StringVar(&o.apiKey, "api-key", "", "when set, answer 401 to requests without this `key` (Authorization: Bearer, or x-api-key)")
	fs.StringVar(&o.text, "text", "Hello| there|!", "the completion, one stream chunk per `|`-separated part")
	fs.Int64Var(&o.reply.PromptTokens, "prompt-tokens", 12, "prompt tokens reported in the usage")
	fs.Int64Var(&o.reply.CompletionTokens, "completion-tokens", 3, "completion tokens reported in the usage")
	fs.DurationVar(&o.reply.ChunkDelay, "chunk-delay", 0, "pause before each stream chunk after the first")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.reply.PromptTokens < 0 || o.reply.CompletionTokens < 0 || o.reply.ChunkDelay < 0 {
		return o, errors.New("-prompt-tokens, -completion-tokens and -chunk-delay must not be negative")
	}
	o.reply.Text = strings.Split(o.text, "|")
	return o, nil
}

// run serves the fake on the address args give until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	fake := fakeupstream.New(o.apiKey)
	fake.SetReply(o.reply)
	srv := &http.Server{Handler: logRequests(fake, stderr), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "fakellm: serving http://%s/v1\n", ln.Addr())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	fake.Close() // held answers return
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// logRequests logs one line per request on w as it arrives, before it is
// answered.
func logRequests(h http.Handler, w io.Writer) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "fakellm: %s %s\n", r.Method, r.URL.Path)
		h.ServeHTTP(rw, r)
	})
}
