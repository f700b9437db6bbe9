package sparkplug

import (
	"slices"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
)

// metric is one Sparkplug metric before encoding; v is nil for a null
// value (is_null), else uint64, float64, bool or string.
type metric struct {
	name string
	typ  pb.DataType
	v    any
}

func (m metric) set(pm *pb.Payload_Metric) {
	switch v := m.v.(type) {
	case nil:
		pm.IsNull = new(true)
	case uint64:
		pm.Value = &pb.Payload_Metric_LongValue{LongValue: v}
	case float64:
		pm.Value = &pb.Payload_Metric_DoubleValue{DoubleValue: v}
	case bool:
		pm.Value = &pb.Payload_Metric_BooleanValue{BooleanValue: v}
	case string:
		pm.Value = &pb.Payload_Metric_StringValue{StringValue: v}
	}
}

func u64(name string, v uint64) metric { return metric{name, pb.DataType_UInt64, v} }

func f64(name string, v *float64) metric {
	if v == nil {
		return metric{name, pb.DataType_Double, nil}
	}
	return metric{name, pb.DataType_Double, *v}
}

// nodeMetrics are the edge node's metrics: the device as a whole. The set
// is fixed (a birth defines it), absent values are null.
func nodeMetrics(s link.Snapshot) []metric {
	ms := []metric{
		{"Properties/sdk_version", pb.DataType_String, s.SDKVersion},
		{"Properties/board", pb.DataType_String, s.Board},
		{"uptime_s", pb.DataType_Double, s.UptimeS},
		f64("power_w", s.Power.Value),
		f64("temperature_c", s.Temperature.Value),
		u64("outbox/depth", uint64(s.Outbox.Depth)),
		u64("outbox/dropped_total", s.Outbox.DroppedTotal),
		u64("link/connects", s.Link.Connects),
	}
	opt := func(name string, v *uint64) metric {
		if v == nil {
			return metric{name, pb.DataType_UInt64, nil}
		}
		return u64(name, *v)
	}
	ms = append(ms, opt("preemptions", s.Preemptions), opt("throttle_events", s.Throttle))
	if s.StoreBytes != nil {
		ms = append(ms, u64("store_bytes", uint64(*s.StoreBytes)))
	} else {
		ms = append(ms, metric{"store_bytes", pb.DataType_UInt64, nil})
	}
	return ms
}

// classes is every request class, so a device's metric set is the same
// in every birth whatever ran in the interval.
var classes = []string{"realtime", "interactive", "batch"}

// deviceMetrics are one model's metrics over the snapshot's interval.
func deviceMetrics(s link.Snapshot, model string) []metric {
	version := ""
	for _, m := range s.Models {
		if m.Name == model {
			version = m.Active
		}
	}
	ms := []metric{{"Properties/version", pb.DataType_String, version}}
	for _, kv := range s.KV {
		if kv.Model == model {
			ms = append(ms, u64("kv/used_bytes", uint64(kv.UsedBytes)), u64("kv/peak_bytes", uint64(kv.PeakBytes)))
		}
	}
	for _, c := range classes {
		var rs link.RequestStats
		for _, r := range s.Requests {
			if r.Model == model && r.Class == c {
				rs = r
			}
		}
		ms = append(ms,
			u64(c+"/completed", rs.Outcomes["completed"]),
			u64(c+"/errors", rs.Outcomes["failed"]+rs.Outcomes["timed_out"]+rs.Outcomes["rejected"]+rs.Outcomes["cancelled"]),
			u64(c+"/output_tokens", rs.OutputTokens),
			metric{c + "/goodput_tok_s", pb.DataType_Double, rs.GoodputTokS},
			f64(c+"/slo_attainment", rs.SLOAttainment),
			f64(c+"/ttft_ms/p50", rs.TTFT.P50), f64(c+"/ttft_ms/p95", rs.TTFT.P95), f64(c+"/ttft_ms/p99", rs.TTFT.P99),
			f64(c+"/tpot_ms/p50", rs.TPOT.P50), f64(c+"/tpot_ms/p99", rs.TPOT.P99),
			f64(c+"/e2e_ms/p99", rs.E2E.P99), f64(c+"/queue_ms/p99", rs.Queue.P99),
		)
	}
	return ms
}

// models lists the snapshot's models (those in the store and those that
// served requests), sorted.
func models(s link.Snapshot) []string {
	var out []string
	for _, m := range s.Models {
		out = append(out, m.Name)
	}
	for _, r := range s.Requests {
		out = append(out, r.Model)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
