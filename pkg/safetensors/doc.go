// Package safetensors reads and writes the safetensors checkpoint format:
// an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the raw little-endian tensor data.
//
// Open maps a file read-only and validates its whole header before handing
// out anything: header size, JSON shape, known dtypes, offsets inside the
// data section, byte spans equal to shape × dtype size, no overlaps, gaps
// or duplicate names. Tensor data are zero-copy views of the mapping, valid
// until Close. OpenDir presents a sharded checkpoint
// (model.safetensors.index.json) as one set of tensors. Write produces
// files Open accepts.
package safetensors
