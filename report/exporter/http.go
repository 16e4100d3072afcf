package exporter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
// `go tool pprof -sample_index=...` picks another.
var Profiles = map[string]string{
	"inuse": "inuse_space", // live now
	"peak":  "peak_space",  // live at the process's peak
	"alloc": "alloc_space", // everything allocated since tracing began
}

// Handler returns the HTTP handler of x's endpoints:
//
//	/metrics                                   Prometheus metrics (and serve's own go_*, process_*)
//	/debug/pprof/{inuse,peak,alloc}[?pid=N[&start=S]]  pprof profiles (gzipped protobuf)
//	/pprof/{inuse,peak,alloc}[?pid=N[&start=S]]        the same
//	/                                                  a plain-text index of processes
//
// Without pid, a profile merges every process held. A PID names its latest
// process; start (the series' start label) names an earlier one that had
// the PID, until it is dropped.
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
		p, err := x.Profile(name, r.URL.Query().Get("pid"), r.URL.Query().Get("start"))
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
		if err := p.Write(w); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}
}

// Profile builds the named profile (see Profiles) of the process pid (its
// instance that started at start, else its latest), or of every process
// held when pid is "".
func (x *Exporter) Profile(name, pid, start string) (*gprofile.Profile, error) {
	def, ok := Profiles[name]
	if !ok {
		return nil, fmt.Errorf("exporter: unknown profile %q (inuse, peak, alloc)", name)
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
		b, err := profile.Build(p.snapshot())
		if err != nil {
			return nil, err
		}
		ps = append(ps, b)
	}
	var out *gprofile.Profile
	switch len(ps) {
	case 0:
		out = &gprofile.Profile{SampleType: profile.SampleTypes}
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

func (x *Exporter) serveIndex(w http.ResponseWriter, _ *http.Request) {
	var b strings.Builder
	b.WriteString("vramprof serve\n\n/metrics\n/debug/pprof/{inuse,peak,alloc}?pid=N  (go tool pprof http://HOST:PORT/debug/pprof/peak?pid=N)\n\n")
	lost := x.Lost()
	fmt.Fprintf(&b, "lost events: %d\n\n%-8s %-12s %-16s %14s %14s %s\n", lost.Total, "PID", "START", "COMMAND", "LIVE", "PEAK", "STATE")
	for _, p := range x.processes() {
		res := p.snapshot()
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
