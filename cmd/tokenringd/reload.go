package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenring/tokenring/config"
)

// configCheckEvery is how often a node looks at its config file for a
// change (a stat; the file is read only when the stat changed).
const configCheckEvery = 250 * time.Millisecond

// configFile is the config file a node reloads: on SIGHUP, and whenever
// the file changes on disk (rewritten in place, replaced by a rename, or
// reached through a symlink that was swapped, as a mounted Kubernetes
// ConfigMap is), looked at every configCheckEvery.
//
// A new file that loads and validates is handed to apply; the parts of it
// that cannot change without a restart (reloadable names the others) keep
// their old values, and the log names them. A file that does not load
// keeps everything as it was: the log gives config.Load's error (file,
// line and field), and tokenring_config_reloads_total{result="refused"}
// counts it. Not safe for concurrent use: run owns it.
type configFile struct {
	path    string
	getenv  func(string) string
	apply   func(config.Config)
	log     *slog.Logger
	reloads *prometheus.CounterVec // by result: applied, refused

	current config.Config // the config in force
	read    config.Config // the file as last read: current before keepRestartOnly
	stamp   fileStamp

	// also is checked with the file, forced on SIGHUP: the rate limit
	// files of rls.config_dir (rlsDir.check); nil: nothing.
	also func(forced bool)
}

// newConfigFile watches path, from which cfg, the config in force, was
// read (and completed at the start: the cluster secret from the
// environment).
func newConfigFile(path string, cfg config.Config, getenv func(string) string, apply func(config.Config), log *slog.Logger) *configFile {
	read, stamp := cfg, stampOf(path)
	if again, err := config.Load(path, getenv); err == nil {
		read = again // cfg as the file says it, without what the start added
	} else {
		stamp = fileStamp{} // changed since the start: the first check reads it
	}
	f := &configFile{
		path: path, getenv: getenv, apply: apply, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tokenring_config_reloads_total",
			Help: "Config file reloads, by result: applied (a changed file loaded and took effect) or refused (it did not load: the old config stays).",
		}, []string{"result"}),
		current: cfg, read: read, stamp: stamp,
	}
	f.reloads.WithLabelValues("applied") // both shown from the start, at 0
	f.reloads.WithLabelValues("refused")
	return f
}

// run checks the file every configCheckEvery and at each value from hup,
// until ctx ends.
func (f *configFile) run(ctx context.Context, hup <-chan os.Signal) {
	t := time.NewTicker(configCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			f.check(true)
			f.checkAlso(true)
		case <-t.C:
			f.check(false)
			f.checkAlso(false)
		}
	}
}

// checkAlso runs also, if any.
func (f *configFile) checkAlso(forced bool) {
	if f.also != nil {
		f.also(forced)
	}
}

// check loads the file when its stamp changed (or always, when forced)
// and applies it when what it says changed.
func (f *configFile) check(forced bool) {
	st := stampOf(f.path)
	if !forced && st == f.stamp {
		return
	}
	f.stamp = st
	if st.size == 0 && !st.statFailed {
		// Built-in defaults, but far more likely a file caught between
		// its truncation and its writing: the next stamp reads it.
		f.refuse(fmt.Errorf("%s is empty: a reload needs the whole config", f.path))
		return
	}
	read, err := config.Load(f.path, f.getenv)
	if err != nil {
		f.refuse(err) // names the file, and the line and field of a problem
		return
	}
	if reflect.DeepEqual(read, f.read) {
		return
	}
	next, kept := keepRestartOnly(f.current, f.read, read)
	f.read, f.current = read, next
	f.apply(next)
	by := "file change"
	if forced {
		by = "SIGHUP"
	}
	f.log.Info("config reloaded", "file", f.path, "by", by, "limits_hash", next.LimitsHash())
	if len(kept) > 0 {
		f.log.Warn("config reloaded: these fields changed in the file but take effect only at a restart", "fields", strings.Join(kept, ","))
	}
	f.reloads.WithLabelValues("applied").Inc() // last: what it counts is done and logged
}

func (f *configFile) refuse(err error) {
	f.log.Error("config reload refused: the old config stays", "err", err)
	f.reloads.WithLabelValues("refused").Inc()
}

// reloadable are the top-level fields of config.Config a reload changes:
// the limits (default, tenants, groups, models), the pools, the client
// tokens and the proxy's API keys. Every other field is read once, at the
// start.
func reloadable(field string) bool {
	switch field {
	case "Limits", "Pools", "Clients", "Keys", "KeyAccounts":
		return true
	}
	return false
}

// keepRestartOnly returns next, the file as now read, with every field
// that is not reloadable set to its value in inForce, and the YAML names of
// those the file changed since it was last read (last). A secret's value
// is never named, only its field. The clients may change, but not appear
// or all go: that would close or open the decision API, which protected
// mode checked at the start.
func keepRestartOnly(inForce, last, next config.Config) (config.Config, []string) {
	var kept []string
	iv, lv, nv := reflect.ValueOf(inForce), reflect.ValueOf(last), reflect.ValueOf(&next).Elem()
	for i := range nv.NumField() {
		field := nv.Type().Field(i)
		if reloadable(field.Name) {
			continue
		}
		if name, _, _ := strings.Cut(field.Tag.Get("yaml"), ","); name != "" && name != "-" &&
			!reflect.DeepEqual(lv.Field(i).Interface(), nv.Field(i).Interface()) {
			kept = append(kept, name)
		}
		nv.Field(i).Set(iv.Field(i))
	}
	// The limits' window and lease TTL shape every window already counted,
	// and max_prompt_bytes what was counted: they change at a restart.
	nl, ll := next.Limits, last.Limits
	for name, changed := range map[string]bool{
		"limits.window":           nl.Window != ll.Window,
		"limits.lease_ttl":        nl.LeaseTTL != ll.LeaseTTL,
		"limits.max_prompt_bytes": nl.MaxPromptBytes != ll.MaxPromptBytes,
	} {
		if changed {
			kept = append(kept, name)
		}
	}
	next.Limits.Window, next.Limits.LeaseTTL = inForce.Limits.Window, inForce.Limits.LeaseTTL
	next.Limits.MaxPromptBytes = inForce.Limits.MaxPromptBytes
	if (len(inForce.Clients) == 0) != (len(next.Clients) == 0) {
		next.Clients = inForce.Clients
		kept = append(kept, "clients (whether there are any)")
	}
	slices.Sort(kept)
	return next, kept
}

// watchConfig returns the loop that reloads the config file at path (see
// configFile) on SIGHUP and when the file changes, with cfg in force now,
// its metric registered on reg; also (nil: none) is checked with it.
func watchConfig(path string, cfg config.Config, getenv func(string) string, reg prometheus.Registerer, log *slog.Logger, apply func(config.Config), also func(bool)) func(context.Context) {
	f := newConfigFile(path, cfg, getenv, apply, log)
	f.also = also
	reg.MustRegister(f.reloads)
	return func(ctx context.Context) {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		f.run(ctx, hup)
	}
}
