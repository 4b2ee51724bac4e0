package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tokenring/tokenring/config"
)

// configMapDir lays out dir as the kubelet mounts a ConfigMap: the file is
// a symlink through ..data, itself a symlink to a timestamped directory,
// and an update swaps ..data. It returns the file's path and a function
// that publishes new contents the same way.
func configMapDir(t *testing.T, dir, first string) (path string, publish func(string)) {
	t.Helper()
	gen := 0
	publish = func(text string) {
		gen++
		data := filepath.Join(dir, "..2026_12_03_"+string(rune('a'+gen)))
		if err := os.Mkdir(data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "tokenring.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(data), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil { // atomic, as the kubelet does
			t.Fatal(err)
		}
	}
	publish(first)
	path = filepath.Join(dir, "tokenring.yaml")
	if err := os.Symlink(filepath.Join("..data", "tokenring.yaml"), path); err != nil {
		t.Fatal(err)
	}
	return path, publish
}

// watched loads path as tokenringd does at its start and watches it,
// recording what it applies.
func watched(t *testing.T, path string) (*configFile, *[]config.Config) {
	t.Helper()
	cfg, err := config.Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var applied []config.Config
	f := newConfigFile(path, cfg, nil, func(c config.Config) { applied = append(applied, c) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return f, &applied
}

func reloads(f *configFile, result string) float64 {
	var m dto.Metric
	if err := f.reloads.WithLabelValues(result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestConfigReloadFollowsASwappedConfigMap(t *testing.T) {
	path, publish := configMapDir(t, t.TempDir(), "limits:\n  tenants:\n    acme: {rpm: 100}\n")
	f, applied := watched(t, path)
	f.check(false)
	if len(*applied) != 0 {
		t.Fatalf("an unchanged file was applied %d times", len(*applied))
	}
	publish("limits:\n  tenants:\n    acme: {rpm: 50}\n")
	f.check(false)
	if len(*applied) != 1 || (*applied)[0].Limits.Tenants["acme"].RPM != 50 {
		t.Fatalf("after the swap: applied %v, want one config with acme at rpm 50", *applied)
	}
	if got := reloads(f, "applied"); got != 1 {
		t.Errorf("tokenring_config_reloads_total{result=applied} = %v, want 1", got)
	}
	f.check(false)
	if len(*applied) != 1 {
		t.Errorf("the same file applied again: %d applications", len(*applied))
	}
}

func TestConfigReloadKeepsTheOldConfigOnABrokenFile(t *testing.T) {
	path, publish := configMapDir(t, t.TempDir(), "limits:\n  tenants:\n    acme: {rpm: 100}\n")
	f, applied := watched(t, path)
	for _, broken := range []string{
		"limits:\n  tenants:\n    acme: {rpm: -5}\n", // does not validate
		"limits:\n  tenants:\n    acme: {rmp: 50}\n", // unknown field
		"limits: [\n", // does not parse
		"limits:\n  tenants:\n    acme: {rpm: ${NOPE}}\n", // unset variable
		"", // caught between its truncation and its writing
	} {
		publish(broken)
		f.check(false)
	}
	if len(*applied) != 0 {
		t.Fatalf("a broken file was applied: %v", *applied)
	}
	if got := reloads(f, "refused"); got != 5 {
		t.Errorf("tokenring_config_reloads_total{result=refused} = %v, want 5", got)
	}
	if rpm := f.current.Limits.Tenants["acme"].RPM; rpm != 100 {
		t.Errorf("acme's rpm in force after broken files: %d, want 100", rpm)
	}
	publish("limits:\n  tenants:\n    acme: {rpm: 70}\n")
	f.check(false)
	if len(*applied) != 1 || (*applied)[0].Limits.Tenants["acme"].RPM != 70 {
		t.Fatalf("a good file after broken ones: applied %v, want acme at rpm 70", *applied)
	}
}

func TestConfigReloadKeepsRestartOnlyFields(t *testing.T) {
	path, publish := configMapDir(t, t.TempDir(), "forward_timeout: 15ms\nlimits:\n  window: 60s\n  tenants:\n    acme: {rpm: 100}\n")
	f, applied := watched(t, path)
	publish("forward_timeout: 40ms\nlimits:\n  window: 120s\n  tenants:\n    acme: {rpm: 50}\npools:\n  gpt-4o: {tpm: 1000}\n")
	f.check(false)
	if len(*applied) != 1 {
		t.Fatalf("applied %d configs, want 1", len(*applied))
	}
	got := (*applied)[0]
	if got.Limits.Tenants["acme"].RPM != 50 || got.Pools["gpt-4o"].TPM != 1000 {
		t.Errorf("reloadable fields not applied: acme %+v, pools %+v", got.Limits.Tenants["acme"], got.Pools)
	}
	if got.ForwardTimeout != 15*time.Millisecond || got.Limits.Window != 60*time.Second {
		t.Errorf("restart-only fields changed by a reload: forward_timeout %v, window %v; want 15ms and 60s", got.ForwardTimeout, got.Limits.Window)
	}
	// What the file says and what is in force differ in exactly the
	// fields the log names as waiting for a restart.
	if _, kept := keepRestartOnly(f.current, f.current, f.read); !slices.Equal(kept, []string{"forward_timeout", "limits.window"}) {
		t.Errorf("fields kept until a restart: %v, want [forward_timeout limits.window]", kept)
	}
}

// A rewrite that keeps the file's size, inode and modification time is
// invisible to the stat: SIGHUP reads the file anyway.
func TestConfigReloadOnSIGHUP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenring.yaml")
	if err := os.WriteFile(path, []byte("limits:\n  tenants:\n    acme: {rpm: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := watched(t, path)
	got := make(chan config.Config, 1)
	f.apply = func(c config.Config) { got <- c }
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("limits:\n  tenants:\n    acme: {rpm: 900}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	f.check(false)
	select {
	case c := <-got:
		t.Fatalf("the stat saw an invisible rewrite: %+v", c.Limits.Tenants)
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { defer close(done); f.run(ctx, hup) }()
	defer func() { cancel(); <-done }()
	hup <- syscall.SIGHUP
	select {
	case c := <-got:
		if rpm := c.Limits.Tenants["acme"].RPM; rpm != 900 {
			t.Errorf("after SIGHUP: acme's rpm %d, want 900", rpm)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGHUP did not reload the file within 10 s")
	}
}

// A reload may change the clients but not open or close the decision API:
// that takes a restart, when protected mode checks it.
func TestConfigReloadKeepsTheAPIOpenOrClosed(t *testing.T) {
	open, err := config.Parse([]byte("limits: {default: {rpm: 10}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := config.Parse([]byte("clients:\n  tok-a: {tenants: [acme]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, kept := keepRestartOnly(open, open, closed)
	if len(got.Clients) != 0 || !slices.Contains(kept, "clients (whether there are any)") {
		t.Errorf("an open API given clients by a reload: clients %v, kept %v", got.Clients, kept)
	}
	got, kept = keepRestartOnly(closed, closed, open)
	if len(got.Clients) != 1 || !slices.Contains(kept, "clients (whether there are any)") {
		t.Errorf("a closed API opened by a reload: clients %v, kept %v", got.Clients, kept)
	}
	other, err := config.Parse([]byte("clients:\n  tok-b: {tenants: [beta]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, kept := keepRestartOnly(closed, closed, other); len(kept) != 0 || got.Clients["tok-b"].Tenants[0] != "beta" {
		t.Errorf("clients replaced by others: clients %v, kept %v", got.Clients, kept)
	}
}
