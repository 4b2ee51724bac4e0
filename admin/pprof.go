package admin

import (
	"net/http"
	"net/http/pprof"
)

// pprofRoutes serves the Go runtime's profiles under /admin/debug/pprof/
// (behind Guard, like the rest of /admin): CPU and allocation
// profiles of a node under load (docs/http-api.md, "Admin endpoints"):
//
//	go tool pprof -seconds 5 http://127.0.0.1:8080/admin/debug/pprof/profile
//	go tool pprof -sample_index=alloc_space http://127.0.0.1:8080/admin/debug/pprof/allocs
//
// The handlers are net/http/pprof's, which find a named profile under
// /debug/pprof/: the /admin prefix is stripped before them.
func pprofRoutes(mux *http.ServeMux) {
	for path, h := range map[string]http.HandlerFunc{
		"/admin/debug/pprof/":        pprof.Index, // the named profiles: allocs, heap, goroutine, ...
		"/admin/debug/pprof/cmdline": pprof.Cmdline,
		"/admin/debug/pprof/profile": pprof.Profile,
		"/admin/debug/pprof/symbol":  pprof.Symbol,
		"/admin/debug/pprof/trace":   pprof.Trace,
	} {
		mux.Handle(path, http.StripPrefix("/admin", h))
	}
}
