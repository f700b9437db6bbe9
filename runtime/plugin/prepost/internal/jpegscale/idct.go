package jpegscale

import "math"

// The scaled inverse transforms: from a block's dequantised coefficients
// straight to the averages of its samples over 8x8 (scale 8) or over each
// 4x4 quarter (scale 4).
//
// The inverse DCT (ITU T.81 A.3.3) of the coefficients S(v,u), v the row
// (vertical frequency) and u the column, is
//
//	s(y,x) = Σ_v Σ_u b_v(y) b_u(x) S(v,u),  b_u(x) = (c_u/2)·cos((2x+1)uπ/16),
//
// with c_0 = 1/√2 and c_u = 1 otherwise, plus the level shift of 128. The
// average over a box of rows Y and columns X is therefore separable:
//
//	avg = Σ_v Σ_u (mean of b_v over Y)·(mean of b_u over X)·S(v,u).
//
// Over all eight x, every b_u with u > 0 sums to zero, so the 8x8 average is
// b_0·b_0·S(0,0) = S(0,0)/8 (scale 8: the DC term alone).
//
// For the left half, x = 0..3, the mean is
//
//	k_u = (1/4)·Σ_{x=0..3} (c_u/2)·cos((2x+1)uπ/16),
//
// and for the right half, x = 4..7, it is (-1)^u·k_u: x → 7-x turns
// (2x+1)uπ/16 into uπ - (2x+1)uπ/16. The two halves add up to the full sum,
// zero for u > 0; for even u they are equal, so both are zero: k_2 = k_4 =
// k_6 = 0, and only rows and columns 0, 1, 3, 5 and 7 reach the 2x2 output.
// Numerically
//
//	k_0 = 1/(2√2) = 0.353553   k_1 = 0.320364   k_3 = -0.112497
//	k_5 = 0.075168             k_7 = -0.063724
//
// Dividing every k_u by k_0 gives r_u = 2√2·k_u, and the quarter averages
// become (1/8)·Σ_v Σ_u (±r_v)(±r_u)·S(v,u) with r_0 = 1 exactly, so a block
// with no AC coefficients gives exactly the scale-8 value in all four
// quarters:
//
//	r_1 = 0.906127   r_3 = -0.318190   r_5 = 0.212608   r_7 = -0.180240
//
// Scale 4 computes this in two separable steps, in fixed point: step 1,
// for each kept row v, the even part r_0·S(v,0) and the odd part
// Σ_{u odd} r_u·S(v,u), whose sum and difference are the row's left and
// right half; block4 adds each coefficient into its row's part as it is
// decoded (rowSlot, rowFix). Step 2, quarters, does the same down each
// half's column of rows. Edge blocks (averageBox, below) need general boxes.
// TestQuarters and TestAverageBox check both against a floating-point
// inverse DCT.

// r_u in fixed point with fixBits fraction bits (round(r_u·2^14)).
const (
	fixBits = 14
	fix1    = 14846
	fix3    = -5213
	fix5    = 3483
	fix7    = -2953
)

// zigzag maps the coded order of a block's coefficients to their row-major
// index (figure A.6).
var zigzag = [64]uint8{
	0, 1, 8, 16, 9, 2, 3, 10,
	17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34,
	27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36,
	29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46,
	53, 60, 61, 54, 47, 55, 62, 63,
}

// rowSlot and rowFix lay out step 1 of the scale-4 transform for the
// coefficient with zigzag index k, at row v and column u: it adds
// S(v,u)·rowFix[k] to the sum rowSlot[k]. Row i of the rows kept (v = 0,
// 1, 3, 5, 7) has two sums: 2i, its even part r_0·S(v,0), and 2i+1, its
// odd part Σ_{u odd} r_u·S(v,u); its left half is even+odd and its right
// half even-odd. Coefficients that do not reach the output go to 15.
var rowSlot, rowFix = func() (slot [64]uint8, fix [64]int64) {
	index := [8]int{0, 1, -1, 2, -1, 3, -1, 4}
	weight := [8]int64{1 << fixBits, fix1, 0, fix3, 0, fix5, 0, fix7}
	for k, nat := range zigzag {
		v, u := nat/8, nat%8
		slot[k], fix[k] = 15, 0
		if i := index[v]; i >= 0 && index[u] >= 0 {
			slot[k] = uint8(2 * i)
			if u > 0 {
				slot[k]++
			}
			fix[k] = weight[u]
		}
	}
	return slot, fix
}()

// dcSample is the average of a block whose quantised DC coefficient is dc:
// dc·q/8 + 128, rounded half up and clamped.
func dcSample(dc, q int32) uint8 {
	return clamp((int64(dc)*int64(q)+4)>>3 + 128)
}

func clamp(v int64) uint8 {
	return uint8(min(max(v, 0), 255))
}

// quarters is step 2 of the scale-4 transform: from step 1's sums (rows,
// rowSlot's layout, scaled by 2^fixBits) to the averages of the four 4x4
// quarters, top left, top right, bottom left, bottom right. Each half's
// column of row sums goes through the same even/odd split as a row did.
func quarters(rows *[16]int64) [4]uint8 {
	var left, right [5]int64
	for i := range 5 {
		even, odd := rows[2*i], rows[2*i+1]
		left[i], right[i] = even+odd, even-odd
	}
	col := func(c *[5]int64) (top, bottom int64) {
		even := c[0] << fixBits
		odd := fix1*c[1] + fix3*c[2] + fix5*c[3] + fix7*c[4]
		return even + odd, even - odd
	}
	// The sums are 8·average·2^(2·fixBits).
	tl, bl := col(&left)
	tr, br := col(&right)
	const (
		shift = 2*fixBits + 3
		bias  = 128<<shift + 1<<(shift-1) // level shift and rounding half up
	)
	return [4]uint8{
		clamp((tl + bias) >> shift),
		clamp((tr + bias) >> shift),
		clamp((bl + bias) >> shift),
		clamp((br + bias) >> shift),
	}
}

// boxWeights[i][b] are the weights of frequencies 0-7 in the average over
// the samples 4i <= x < b of a block, for the boxes of edge blocks: [0,b)
// at scale 8, [0,b) and [4,b) at scale 4. As above they are normalised by
// the DC weight, so boxWeights[i][b][0] = 1 and the average is
// (1/8)·Σ_v Σ_u wy[v]·wx[u]·S(v,u) with
//
//	w_u = √2/(b-4i)·Σ_{4i<=x<b} cos((2x+1)uπ/16)  (u > 0).
//
// A whole half gives back the ±r_u above, and a whole block zero.
var boxWeights = func() (t [2][9][8]int64) {
	for a := range 2 {
		for b := 4*a + 1; b <= 8; b++ {
			t[a][b][0] = 1 << fixBits
			for u := 1; u < 8; u++ {
				s := 0.0
				for x := 4 * a; x < b; x++ {
					s += math.Cos(float64((2*x+1)*u) * math.Pi / 16)
				}
				t[a][b][u] = int64(math.Round(s * math.Sqrt2 / float64(b-4*a) * (1 << fixBits)))
			}
		}
	}
	return t
}()

// averageBox returns the average of a block's samples in rows y0 <= y < y1
// and columns x0 <= x < x1 (x0, y0 are 0 or 4) from all its dequantised
// coefficients (blk, row-major): row by row the weighted sum across, then
// the weighted sum of the rows.
func averageBox(blk *[64]int32, x0, x1, y0, y1 int) uint8 {
	wx, wy := &boxWeights[x0/4][x1], &boxWeights[y0/4][y1]
	var sum int64
	for v := range 8 {
		row := blk[8*v : 8*v+8 : 8*v+8]
		var r int64
		for u, c := range row {
			r += wx[u] * int64(c)
		}
		sum += wy[v] * r
	}
	const shift = 2*fixBits + 3
	return clamp((sum + 128<<shift + 1<<(shift-1)) >> shift)
}
