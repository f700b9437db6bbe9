// Package month holds one test: a month of a fleet's life, run in
// minutes. A real mosquitto, a real fleet server and several real devices
// (each its own process: store, outbox, MQTT link, update agent and an
// engine that runs the health checks in ONNX Runtime) live through a
// scripted timeline of releases — failing health checks, operator
// rollbacks of a device and of a segment, SIGKILLs at random points, clean
// restarts, broker restarts with and without persistence, a fleet-server
// kill, a device offline across several releases and clocks that jump —
// and at the end the test prints and checks what a fleet manager is
// promised: every device on the release the fleet intends, every event
// delivered, each disk within its bound, the bytes fetched against the
// bytes that changed, the bandwidth cap over every 10-s window, and every
// store verifying.
//
//	go test -count=1 -v -run TestMonth ./update/month      (make month)
//
// EDGEINFER_MONTH_RELEASES (default 32) and EDGEINFER_MONTH_DEVICES
// (default 4) make a longer run; EDGEINFER_MONTH_SEED replays one.
package month
