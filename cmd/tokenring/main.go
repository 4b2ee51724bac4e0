// Command tokenring is the admin CLI and load generator for a tokenring
// cluster.
//
//	tokenring ring  -node URL              print the node's view of the ring
//	tokenring owner -node URL TENANT       print the owner of TENANT
//	tokenring load  [flags]                drive the decision API, print throughput and latency
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "tokenring:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

const usage = `usage:
  tokenring ring  [-node URL]          the node's view of the ring
  tokenring owner [-node URL] TENANT   the owner of TENANT
  tokenring load  [flags]              load generator (tokenring load -h)`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w:\n%s", errUsage, usage)
	}
	switch args[0] {
	case "ring":
		return adminGet(args[1:], stdout, stderr, "ring", func(string) string { return "/admin/ring" })
	case "owner":
		return adminGet(args[1:], stdout, stderr, "owner", func(tenant string) string { return "/admin/owner?tenant=" + tenant })
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q\n%s", errUsage, args[0], usage)
}

func adminGet(args []string, stdout, stderr io.Writer, name string, path func(arg string) string) error {
	fs := newFlagSet(name, stderr)
	nodeURL := fs.String("node", "http://127.0.0.1:8080", "node base `URL`")
	token := fs.String("token", os.Getenv("TOKENRING_ADMIN_TOKEN"), "admin `token` (env TOKENRING_ADMIN_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	arg := ""
	if name == "owner" {
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: owner takes one TENANT", errUsage)
		}
		arg = fs.Arg(0)
	}
	req, err := http.NewRequest(http.MethodGet, *nodeURL+path(arg), nil)
	if err != nil {
		return err
	}
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return fmt.Errorf("%s: %d, not JSON: %w", req.URL, resp.StatusCode, err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	return nil
}
