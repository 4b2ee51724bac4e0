package main

// The end of the demo: the counts after the join, and the stop.

import (
	"errors"
	"net/http"
)

// afterJoin checks that n4 owns the hot tenant now, that both tenants kept
// their counts (hot and other, read before the join), and that the hot
// tenant is still refused, by n4.
func (d *demo) afterJoin(hot, other tenantJSON) error {
	var o ownerJSON
	if err := d.getJSON(d.nodes[1], "/admin/owner?tenant="+d.hot, &o); err != nil {
		return err
	}
	if err := check(o.Owner == "n4", "want %s owned by n4 after the join, got %s", d.hot, o.Owner); err != nil {
		return err
	}
	if err := d.ownersAgree(d.hot, "n4"); err != nil {
		return err
	}
	var hot2, other2 tenantJSON
	if err := d.getJSON(d.nodes[2], "/v1/tenants/"+d.hot, &hot2); err != nil {
		return err
	}
	if err := d.quietJSON(d.nodes[2], "/v1/tenants/"+d.other, &other2); err != nil {
		return err
	}
	if err := check(hot2.Owner == "n4" && hot2.Limits.counts() == hot.Limits.counts(),
		"want %s on n4 with %s, got %s with %s", d.hot, hot.Limits.counts(), hot2.Owner, hot2.Limits.counts()); err != nil {
		return err
	}
	if err := check(other2.Limits.counts() == other.Limits.counts(),
		"want %s with %s, got %s", d.other, other.Limits.counts(), other2.Limits.counts()); err != nil {
		return err
	}
	d.say("→ after:  %s on %s: %s (unchanged)", d.hot, hot2.Owner, hot2.Limits.counts())
	d.say("→ after:  %s on %s: %s (unchanged)", d.other, other2.Owner, other2.Limits.counts())
	a, err := d.call(d.nodes[3], http.MethodPost, "/v1/acquire", nil, d.acquireBody(), "Retry-After")
	if err != nil {
		return err
	}
	var res acquireJSON
	if err := decode(a, http.StatusTooManyRequests, &res); err != nil {
		return err
	}
	if err := check(res.Owner == "n4" && res.Reason == "requests", "want n4 to refuse on requests, got %s", compact(a.body)); err != nil {
		return err
	}
	d.say("→ n4 refuses %s as %s did: the window came with the partition, not a fresh budget", d.hot, d.from)
	return nil
}

// stop ends every process the demo started and checks that none is left.
func (d *demo) stop() error {
	d.title("Stop: SIGTERM to every process the demo started, newest first (SIGKILL after %v)", stopGrace)
	var errs []error
	for _, s := range stopAll(d.procs) {
		how := "exited"
		if s.killed {
			how = "killed"
			errs = append(errs, errors.New(s.name+" ignored SIGTERM"))
		} else if s.err != nil {
			how = "exited with " + s.err.Error()
			errs = append(errs, errors.New(s.name+" "+how))
		}
		d.say("%-8s %s after %.1fs", s.name, how, s.took.Seconds())
	}
	for _, p := range d.procs {
		if !gone(p.cmd.Process.Pid) {
			errs = append(errs, errors.New(p.name+" is still running"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	d.say("all %d processes stopped; none is left running", len(d.procs))
	return nil
}
