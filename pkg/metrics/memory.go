package metrics

// Memory holds memory gauges the caller reads from the engine and KV cache;
// the package only reports them. Zero means "not reported".
type Memory struct {
	WeightBytes     int64 `json:"weight_bytes"`
	KVBytesPerToken int64 `json:"kv_bytes_per_token"`
	KVCapacityBytes int64 `json:"kv_capacity_bytes"`
	KVUsedBytes     int64 `json:"kv_used_bytes"`
	KVPeakBytes     int64 `json:"kv_peak_bytes"`
	// KVWasteBytes is allocated KV memory holding no token (the unfilled
	// tail of partly used blocks): internal fragmentation.
	KVWasteBytes  int64 `json:"kv_waste_bytes"`
	KVBlocksUsed  int   `json:"kv_blocks_used"`
	KVBlocksTotal int   `json:"kv_blocks_total"`
	// KVWasteRatio is KVWasteBytes/KVUsedBytes, filled by Summarize; null
	// when nothing is used.
	KVWasteRatio *float64 `json:"kv_waste_ratio"`
}

// withRatio returns m with KVWasteRatio computed.
func (m Memory) withRatio() Memory {
	m.KVWasteRatio = ratio(float64(m.KVWasteBytes), float64(m.KVUsedBytes))
	return m
}
