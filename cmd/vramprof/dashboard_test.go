//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vramprof/vramprof/probes/event"
	"github.com/vramprof/vramprof/report/exporter"
)

// dashboardPath is the Grafana dashboard shipped with the deploy files.
const dashboardPath = "deploy/grafana/vramprof-dashboard.json"

// externalMetrics are the metrics the dashboard reads from other
// exporters deployed beside serve.
var externalMetrics = map[string]string{
	"DCGM_FI_DEV_FB_USED": "dcgm-exporter",
}

// TestDashboardMetrics parses the Grafana dashboard and checks every
// PromQL expression in it (panel targets and template queries): promtool
// parses each, and every metric it names is one `vramprof serve` exports
// (read from an exporter's /metrics after the records serve gets: a
// process with a finding, NVML's devices) or one of the named other
// exporters'. A panel over a metric serve does not export would stay empty.
func TestDashboardMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &dash), dashboardPath)
	require.NotEmpty(t, dash.Panels)

	exported := serveMetricNames(t)
	exprs := map[string]string{} // expression -> where
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			exprs[tg.Expr] = "panel " + p.Title
		}
	}
	for _, v := range dash.Templating.List {
		if m := labelValues.FindStringSubmatch(v.Definition); m != nil {
			exprs[m[1]] = "variable " + v.Name
		}
	}
	for expr, where := range exprs {
		names := metricNames(expr)
		assert.NotEmpty(t, names, "%s: no metric in %q", where, expr)
		for _, n := range names {
			if _, ok := externalMetrics[n]; ok {
				continue
			}
			_, ok := exported[n]
			assert.True(t, ok, "%s: %s is not a metric serve exports (%q)", where, n, expr)
		}
	}
	checkPromQL(t, exprs)
}

// labelValues matches a Grafana label_values(metric, label) variable.
var labelValues = regexp.MustCompile(`^label_values\(([^,]+),\s*\w+\)$`)

// serveMetricNames returns the metric families an exporter serves once it
// has what serve feeds it: a traced process of a Kubernetes pod (whose
// failed allocation is an oom finding) and NVML's status, device and
// sample; with each, the names of its series' labels.
func serveMetricNames(t *testing.T) map[string]map[string]bool {
	t.Helper()
	x := exporter.New(exporter.Options{Alive: func(uint32, uint64) bool { return true }})
	x.SetHeader(&event.Header{Mode: "serve"})
	for _, r := range []event.Record{
		&event.Process{PID: 42, Command: []string{"/usr/bin/trainer"}, Cgroup: "/kubepods/pod11111111-2222-3333-4444-555555555555/" + strings.Repeat("a", 64)},
		&event.Event{Time: 1, PID: 42, Addr: 1 << 30, Size: 1 << 20, Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment},
		&event.Event{Time: 2, PID: 42, Size: 1 << 40, Ret: 2, Kind: event.KindAlloc, API: event.APICudaMalloc, Layer: event.LayerSegment},
		&event.NVMLStatus{Time: 1, Available: true},
		&event.DeviceInfo{Index: 0, Name: "NVIDIA A100", UUID: "GPU-a", TotalBytes: 1 << 34},
		&event.Sample{Time: 3, Device: 0, TotalBytes: 1 << 34, UsedBytes: 1 << 30, FreeBytes: 1<<34 - 1<<30,
			Processes: []event.ProcessUsage{{PID: 42, UsedBytes: 1 << 29}}},
	} {
		require.NoError(t, x.Write(r))
	}
	srv := httptest.NewServer(x.Handler())
	defer srv.Close()
	out := map[string]map[string]bool{}
	for name, f := range scrapeMetrics(t, srv.URL) {
		out[name] = map[string]bool{}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				out[name][l.GetName()] = true
			}
		}
	}
	require.Contains(t, out, exporter.MetricFindings, "the fed process has a finding")
	return out
}

// TestDashboardLabels: every label a dashboard query over serve's metrics
// names (its by clauses, its matchers, its legend) is one of the labels
// serve's series of those metrics carry, or a target label Prometheus adds
// (instance, job): a panel grouping by a label serve does not export
// draws one line with an empty name.
func TestDashboardLabels(t *testing.T) {
	b, err := os.ReadFile(dashboardPath)
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash), dashboardPath)
	exported := serveMetricNames(t)
	checked := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			have := map[string]bool{"instance": true, "job": true}
			ours := true
			for _, n := range names {
				ours = ours && strings.HasPrefix(n, "vramprof_")
				for l := range exported[n] {
					have[l] = true
				}
			}
			if !ours {
				continue // another exporter's labels
			}
			checked++
			for _, l := range promqlLabels(tg.Expr, tg.Legend) {
				assert.True(t, have[l], "panel %q: label %s is not on serve's %v (%q)", p.Title, l, names, tg.Expr)
			}
		}
	}
	assert.Positive(t, checked)
}

var (
	promqlGrouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	promqlMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"`)
	legendLabel    = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
)

// promqlLabels returns the label names an expression groups by or
// matches on, and those its legend prints.
func promqlLabels(expr, legend string) []string {
	var out []string
	for _, m := range promqlGrouping.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	for _, m := range promqlMatcher.FindAllStringSubmatch(expr, -1) {
		out = append(out, m[1])
	}
	for _, m := range legendLabel.FindAllStringSubmatch(legend, -1) {
		out = append(out, m[1])
	}
	return out
}

// promqlDrop removes from an expression what holds no metric name: string
// literals, label matchers, ranges and the label lists of by, without,
// on, ignoring, group_left and group_right.
var promqlDrop = []*regexp.Regexp{
	regexp.MustCompile(`"(?:[^"\\]|\\.)*"`),
	regexp.MustCompile(`\{[^}]*\}`),
	regexp.MustCompile(`\[[^\]]*\]`),
	regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
}

var (
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*\s*\(?`)
	promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
)

// metricNames returns the metric names a PromQL expression reads: the
// identifiers left once promqlDrop is applied that are not keywords and
// not called (functions, aggregations).
func metricNames(expr string) []string {
	for _, re := range promqlDrop {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, m := range promqlIdent.FindAllString(expr, -1) {
		if strings.HasSuffix(m, "(") {
			continue
		}
		m = strings.TrimSpace(m)
		if !slices.Contains(promqlKeywords, m) && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (command, pod_uid) (rate(vramprof_allocated_bytes_total{instance=~"$instance"}[5m]))`: {"vramprof_allocated_bytes_total"},
		`a * on (x) group_left (y, z) max by (x) (label_replace(b, "x", "$1", "uid", "(.+)"))`:        {"a", "b"},
		`max(DCGM_FI_DEV_FB_USED) * 1048576 > bool 0`:                                                 {"DCGM_FI_DEV_FB_USED"},
	} {
		assert.Equal(t, want, metricNames(expr), expr)
	}
}

// checkPromQL has promtool parse every expression, as recording rules
// (Grafana's variables replaced by values). Without promtool (Debian's
// prometheus package) that part is skipped, or fails with CI=true.
func checkPromQL(t *testing.T, exprs map[string]string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (apt-get install prometheus); CI=true: the dashboard's PromQL must be checked")
		}
		t.Skip("promtool not found (apt-get install prometheus): PromQL syntax not checked")
	}
	vars := strings.NewReplacer("$instance", ".*", "$hostname", ".*", "$__rate_interval", "1m")
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	i := 0
	for expr := range exprs {
		q, err := json.Marshal(vars.Replace(expr)) // a JSON string is a YAML string
		require.NoError(t, err)
		fmt.Fprintf(&rules, "      - record: dashboard:expr%d\n        expr: %s\n", i, q)
		i++
	}
	path := filepath.Join(t.TempDir(), "rules.yml")
	require.NoError(t, os.WriteFile(path, []byte(rules.String()), 0o644))
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	require.NoError(t, err, "promtool check rules:\n%s\n%s", out, rules.String())
}
