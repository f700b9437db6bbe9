// Package device is the whole device in one package: what an application
// embeds to be a device of the fleet, and what `edgeinfer agent` and
// `edgeinfer serve` run.
//
// From one Config (whose JSON form is the agent's configuration file) Open
// starts, in order:
//
//   - the model store (pkg/store): the device is its one holder, and hands
//     the engine exported bundle directories (engine.StoredBundle);
//   - the engine (runtime/engine) with the store's active models and any
//     bundles named in Config.Engine;
//   - the power and temperature sensors (pkg/power);
//   - with a broker, the link (pkg/link): one MQTT connection, its durable
//     outbox, telemetry (and a Sparkplug B edge node), commands;
//   - with an update section, the update agent (update) and the device's
//     side of rollouts (update/rollout): releases fetched from the fleet,
//     verified, health-checked in the serving engine and swapped in while
//     it serves (EngineActivator);
//   - with an http section, the local OpenAI-compatible HTTP API
//     (runtime/serve) over the engine, last, so its first request finds
//     everything running.
//
// Close stops them in the reverse order: the API drains its streams, the
// updates stop, telemetry stops, the outbox flushes as far as the broker
// allows, the link says offline, the engine and the stores close.
//
// The layering (pkg/archtest): the device sits above the engine, the HTTP
// API and the update side, which import none of it; update and the fleet
// build without cgo and reach the engine only through the adapters here
// (EngineActivator, CheckActivator, Records, EngineStats).
package device
