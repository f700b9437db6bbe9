// Package sparkplugpb holds the Sparkplug B payload types generated from
// sparkplug_b.proto (written from the Sparkplug 3.0.0 specification).
package sparkplugpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative sparkplug_b.proto
