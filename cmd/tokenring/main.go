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
	"flag"
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
	os.Exit(exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
}

// errUsage wraps every command line mistake (exit 2). Returned bare, the
// usage has already been printed and nothing more is.
var errUsage = errors.New("usage")

// exitCode reports err on stderr and returns the exit status: 0 for none
// or for -h (the flag package has printed the usage), 2 for a usage error,
// 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case err == errUsage:
		return 2
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "tokenring:", err)
		return 2
	}
	fmt.Fprintln(stderr, "tokenring:", err)
	return 1
}

const usage = `usage:
  tokenring ring  [-node URL]          the node's view of the ring
  tokenring owner [-node URL] TENANT   the owner of TENANT
  tokenring load  [flags]              load generator (tokenring load -h)`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return errUsage
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
	fmt.Fprintf(stderr, "tokenring: unknown command %q\n%s\n", args[0], usage)
	return errUsage
}

func adminGet(args []string, stdout, stderr io.Writer, name string, path func(arg string) string) error {
	fs := newFlagSet(name, stderr)
	nodeURL := fs.String("node", "http://127.0.0.1:8080", "node base `URL`")
	token := fs.String("token", os.Getenv("TOKENRING_ADMIN_TOKEN"), "admin `token` (env TOKENRING_ADMIN_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err) // -h: flag.ErrHelp, usage printed (exitCode: 0)
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
