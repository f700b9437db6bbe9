// Package npy reads and writes NumPy .npy files (format versions 1.0 to
// 3.0): the one reader the CLI's `run --input` and quant's calibration
// directories share. Only C-order arrays of little-endian (or one-byte)
// numeric and bool element types are accepted; object arrays, structured
// dtypes and Fortran order are refused with ErrFormat.
//
// A .npy file usually comes from outside (a user's sample, a calibration
// set), so Parse trusts nothing in the header: the element count is
// bounded, must match the data length exactly, and every error says what
// was wrong. FuzzParse keeps it so.
package npy
