package exporter

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	gprofile "github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vramprof/vramprof/profile"
)

// Profiles are the pprof endpoints' names and the sample type each shows
// by default. Every profile carries all six sample types (profile.SampleTypes):
// `go tool pprof -sample_index=...` picks another. allocs and heap are Go's
// names (net/http/pprof) for alloc and inuse.
var Profiles = map[string]string{
	"inuse":  "inuse_space", // live now
	"heap":   "inuse_space",
	"peak":   "peak_space",  // live at the process's peak
	"alloc":  "alloc_space", // everything allocated since tracing began
	"allocs": "alloc_space",
}

// profileDocs describe the profiles on the /debug/pprof/ index, in its
// order.
var profileDocs = []struct{ name, doc string }{
	{"allocs", "every device allocation since tracing began (alloc_space); ?seconds=N: the ones made in the next N seconds"},
	{"alloc", "the same as allocs"},
	{"heap", "device memory live now (inuse_space); ?seconds=N: how it changed over the next N seconds (what grew)"},
	{"inuse", "the same as heap"},
	{"peak", "device memory live at each process's peak (peak_space); no ?seconds: a peak is a maximum, not a sum"},
}

// maxDeltaSeconds bounds ?seconds=N: the response must be written within
// the server's write timeout (a margin for building the profiles).
const maxDeltaSeconds = int((writeTimeout - 30*time.Second) / time.Second)

// Handler returns the HTTP handler of x's endpoints:
//
//	/metrics                                   Prometheus metrics (and serve's own go_*, process_*)
//	/debug/pprof/                              an index of the profiles and processes (HTML)
//	/debug/pprof/{allocs,heap,inuse,peak,alloc}[?pid=N[&start=S]][&seconds=N]  pprof profiles (gzipped protobuf)
//	/pprof/...                                 the same
//	/                                          a plain-text index of processes
//
// Without pid, a profile merges every process held. A PID names its latest
// process; start (the series' start label) names an earlier one that had
// the PID, until it is dropped. With seconds=N (allocs, heap: not peak),
// the endpoint waits N seconds and returns the difference between the
// profile then and now, as net/http/pprof does: what was allocated, or how
// live memory changed, in those N seconds.
func (x *Exporter) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	// serve's own memory and CPU (go_*, process_*) beside the figures: the
	// bound on its memory is something to watch on a fleet.
	reg.MustRegister(x.Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	for name := range Profiles {
		mux.HandleFunc("GET /debug/pprof/"+name, x.serveProfile(name))
		mux.HandleFunc("GET /pprof/"+name, x.serveProfile(name))
	}
	mux.HandleFunc("GET /debug/pprof/{$}", x.servePprofIndex)
	mux.Handle("GET /debug/pprof", http.RedirectHandler("/debug/pprof/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /{$}", x.serveIndex)
	return mux
}

// shutdownWait is how long Serve waits for requests in flight once its
// context is done: a profile of a big process takes a moment to build, a
// scrape does not.
const shutdownWait = 5 * time.Second

// Serve serves Handler on ln, and calls Sweep every sweep, until ctx is
// done or the server fails; then it shuts the server down, waiting up to
// 5 s for requests in flight, and closes ln. It returns the server's
// error: nil after ctx is done and a clean shutdown.
//
// At most MaxConns connections are held open, each within its timeouts
// (conns.go): a flood of connections neither grows serve's memory nor
// takes its descriptors, and scrapes go on being answered.
func (x *Exporter) Serve(ctx context.Context, ln net.Listener, sweep time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lim := newConnLimiter(ln, MaxConns)
	x.mu.Lock()
	x.limiter = lim
	x.mu.Unlock()
	srv := &http.Server{
		Handler:           x.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		ConnState:         lim.track,
	}
	ln = lim
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	t := time.NewTicker(sweep)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case err := <-srvErr:
			return err
		case <-t.C:
			x.Sweep()
		case <-ctx.Done():
		}
	}
	shutCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), shutdownWait)
	defer stop()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (x *Exporter) serveProfile(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		pid, start := q.Get("pid"), q.Get("start")
		var seconds int
		if v := q.Get("seconds"); v != "" {
			n, err := strconv.Atoi(v)
			switch {
			case err != nil || n <= 0 || n > maxDeltaSeconds:
				http.Error(w, fmt.Sprintf("exporter: seconds %q is not a whole number of seconds from 1 to %d", v, maxDeltaSeconds), http.StatusBadRequest)
				return
			case Profiles[name] == "peak_space":
				http.Error(w, "exporter: the peak profile has no ?seconds delta (a peak is a maximum, not a sum): use allocs or heap", http.StatusBadRequest)
				return
			}
			seconds = n
		}
		p, err := x.Profile(name, pid, start)
		switch {
		case errors.Is(err, ErrNoProcess):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name+".pb.gz"))
		if seconds > 0 {
			// The base is taken: say so now (a client can start its
			// workload), then wait out the window.
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			t := time.NewTimer(time.Duration(seconds) * time.Second)
			defer t.Stop()
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
			if p, err = x.delta(name, pid, start, p, time.Duration(seconds)*time.Second); err != nil {
				// The status is sent: an empty body is what the client
				// can be told.
				return
			}
		}
		if err := p.Write(w); err != nil && seconds == 0 {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// delta returns the named profile now minus base, taken d ago: the
// allocations made, or the change of live memory, in between. Samples
// that did not change are left out.
func (x *Exporter) delta(name, pid, start string, base *gprofile.Profile, d time.Duration) (*gprofile.Profile, error) {
	now, err := x.Profile(name, pid, start)
	if err != nil {
		return nil, err
	}
	base = base.Copy()
	base.Scale(-1)
	out, err := gprofile.Merge([]*gprofile.Profile{base, now})
	if err != nil {
		return nil, fmt.Errorf("delta profile: %w", err)
	}
	kept := out.Sample[:0]
	for _, s := range out.Sample {
		if slices.ContainsFunc(s.Value, func(v int64) bool { return v != 0 }) {
			kept = append(kept, s)
		}
	}
	out.Sample = kept
	out.TimeNanos = now.TimeNanos
	out.DurationNanos = int64(d)
	out.DefaultSampleType = Profiles[name]
	return out, nil
}

// Profile builds the named profile (see Profiles) of the process pid (its
// instance that started at start, else its latest), or of every process
// held when pid is "".
func (x *Exporter) Profile(name, pid, start string) (*gprofile.Profile, error) {
	def, ok := Profiles[name]
	if !ok {
		return nil, fmt.Errorf("exporter: unknown profile %q (allocs, heap, inuse, peak, alloc)", name)
	}
	var procs []*proc
	if pid == "" {
		procs = x.processes()
	} else {
		n, err := strconv.ParseUint(pid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("exporter: pid %q is not a process ID", pid)
		}
		var st uint64
		if start != "" {
			if st, err = strconv.ParseUint(start, 10, 64); err != nil || st == 0 {
				return nil, fmt.Errorf("exporter: start %q is not a process start time (the series' start label)", start)
			}
		}
		p := x.instance(uint32(n), st)
		if p == nil {
			if st != 0 {
				return nil, fmt.Errorf("%w: %d started at %d", ErrNoProcess, n, st)
			}
			return nil, fmt.Errorf("%w: %d", ErrNoProcess, n)
		}
		procs = []*proc{p}
	}
	var ps []*gprofile.Profile
	for _, p := range procs {
		b, err := profile.Build(p.soFar())
		if err != nil {
			return nil, err
		}
		ps = append(ps, b)
	}
	var out *gprofile.Profile
	switch len(ps) {
	case 0:
		// As profile.Build makes them, so that a delta can merge it.
		out = &gprofile.Profile{SampleType: profile.SampleTypes,
			PeriodType: &gprofile.ValueType{Type: "space", Unit: "bytes"}, Period: 1}
	case 1:
		out = ps[0]
	default:
		var err error
		if out, err = gprofile.Merge(ps); err != nil {
			return nil, fmt.Errorf("merge profiles: %w", err)
		}
	}
	out.DefaultSampleType = def
	// Frames were symbolized here, from the files the processes map: a
	// mapping without HasFunctions makes `go tool pprof URL` ask this
	// server's /debug/pprof/symbol, which a GPU profile cannot answer.
	for _, m := range out.Mapping {
		m.HasFunctions = true
	}
	return out, nil
}

// servePprofIndex is /debug/pprof/: the profiles, each with its link, and
// the processes held, each with theirs, as net/http/pprof's index lists
// Go's.
func (x *Exporter) servePprofIndex(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	b.WriteString("<!DOCTYPE html>\n<html><head><title>/debug/pprof/</title></head><body>\n")
	b.WriteString("<p>/debug/pprof/: GPU memory profiles of the processes vramprof serve traces (device memory, segment layer).</p>\n")
	b.WriteString("<p>Read one with <code>go tool pprof http://HOST:PORT/debug/pprof/allocs?seconds=30</code>; add <code>pid=N</code> for one process.</p>\n")
	b.WriteString("<table>\n<thead><tr><th>Profile</th><th>What</th></tr></thead>\n")
	for _, d := range profileDocs {
		fmt.Fprintf(&b, "<tr><td><a href=\"%s\">%s</a></td><td>%s</td></tr>\n", d.name, d.name, html.EscapeString(d.doc))
	}
	b.WriteString("</table>\n<p>Processes:</p>\n<table>\n<thead><tr><th>PID</th><th>Command</th><th>State</th><th>Profiles</th></tr></thead>\n")
	for _, p := range x.processes() {
		p.mu.Lock()
		pid, start, command, state := p.pid, p.start, p.command, "running"
		if !p.exited.IsZero() {
			state = "exited"
		}
		p.mu.Unlock()
		q := fmt.Sprintf("pid=%d", pid)
		if start != 0 {
			q += fmt.Sprintf("&amp;start=%d", start)
		}
		fmt.Fprintf(&b, "<tr><td>%d</td><td>%s</td><td>%s</td><td><a href=\"allocs?%s\">allocs</a> <a href=\"heap?%s\">heap</a> <a href=\"peak?%s\">peak</a></td></tr>\n",
			pid, html.EscapeString(command), state, q, q, q)
	}
	b.WriteString("</table>\n</body></html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}

func (x *Exporter) serveIndex(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	b.WriteString("vramprof serve\n\n/metrics\n/debug/pprof/  (the profiles: go tool pprof http://HOST:PORT/debug/pprof/peak?pid=N, .../allocs?seconds=30)\n\n")
	lost := x.Lost()
	fmt.Fprintf(&b, "lost events: %d\n\n%-8s %-12s %-16s %14s %14s %s\n", lost.Total, "PID", "START", "COMMAND", "LIVE", "PEAK", "STATE")
	for _, p := range x.processes() {
		res := p.soFar()
		p.mu.Lock()
		state, command := "running", p.command
		if !p.exited.IsZero() {
			state = "exited"
		}
		p.mu.Unlock()
		var live, peak uint64
		for _, pr := range res.Processes {
			if pr.SupersededAt == 0 {
				live, peak = pr.Totals.LiveBytesAtEnd, pr.Totals.PeakBytes
			}
		}
		fmt.Fprintf(&b, "%-8d %-12d %-16s %14d %14d %s\n", p.pid, p.start, command, live, peak, state)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
