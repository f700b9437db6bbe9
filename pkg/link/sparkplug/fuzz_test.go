package sparkplug

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/edgeinfer/edgeinfer/pkg/link"
	pb "github.com/edgeinfer/edgeinfer/pkg/link/sparkplug/sparkplugpb"
)

// FuzzCommand: NCMD/DCMD payloads come from the network; any bytes must
// be handled without a panic.
func FuzzCommand(f *testing.F) {
	ok, _ := proto.Marshal(&pb.Payload{Metrics: []*pb.Payload_Metric{{Name: proto.String(RebirthMetric), Value: &pb.Payload_Metric_BooleanValue{BooleanValue: true}}}})
	f.Add(ok)
	f.Add([]byte{0x12, 0x02, 0x0a})
	n, _ := NewNode(Config{Group: "g", Node: "n"})
	f.Fuzz(func(t *testing.T, b []byte) {
		n.onCommand(link.Message{Topic: n.Topic("NCMD", ""), Payload: b})
	})
}
