// Decodes Sparkplug B payloads with Eclipse Tahu's sparkplug-payload.
// usage: node decode.js <path to sparkplug-payload> <file of "topic hex" lines>
// Prints one JSON line per payload; 64-bit values as decimal strings.
const sp = require(process.argv[2]).get("spBv1.0");
const Long = require(require.resolve("long", { paths: [process.argv[2]] }));
const lines = require("fs").readFileSync(process.argv[3], "utf8").trim().split("\n");
const big = (k, v) => (v && typeof v === "object" && "low" in v && "high" in v) ? Long.fromValue(v).toString() : v;
for (const l of lines) {
  const [topic, hex] = l.split(" ");
  const payload = sp.decodePayload(new Uint8Array(Buffer.from(hex, "hex")));
  console.log(JSON.stringify({ topic, payload }, big));
}
