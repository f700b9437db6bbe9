package prepost

// VADSpec is Silero VAD's get_speech_timestamps smoothing.
type VADSpec struct {
	Threshold     float64 // speech when probability >= this, 0.5
	NegThreshold  float64 // silence when below; 0 means Threshold-0.15
	MinSpeechMS   int     // shorter speech is dropped, 250
	MinSilenceMS  int     // silence that ends a segment, 100
	SpeechPadMS   int     // added on both sides, 30
	SampleRate    int     // 16000
	WindowSamples int     // samples per probability, 512 at 16 kHz
}

// SileroVAD is VADSpec with Silero's defaults.
var SileroVAD = VADSpec{Threshold: 0.5, MinSpeechMS: 250, MinSilenceMS: 100, SpeechPadMS: 30, SampleRate: 16000, WindowSamples: 512}

// Segment is a stretch of speech in samples [Start, End).
type Segment struct{ Start, End int64 }

// VADSegments turns per-window speech probabilities of an audio of
// audioLen samples into speech segments, as Silero's
// get_speech_timestamps does (hysteresis, minimum speech and silence,
// padding split between close segments).
func VADSegments(probs []float32, audioLen int64, s VADSpec) []Segment {
	neg := s.NegThreshold
	if neg == 0 {
		neg = max(s.Threshold-0.15, 0.01)
	}
	sr := int64(s.SampleRate)
	minSpeech := sr * int64(s.MinSpeechMS) / 1000
	minSilence := sr * int64(s.MinSilenceMS) / 1000
	pad := sr * int64(s.SpeechPadMS) / 1000
	win := int64(s.WindowSamples)
	var out []Segment
	var cur Segment
	triggered := false
	var tempEnd int64
	for i, p := range probs {
		pos := win * int64(i)
		sp := float64(p)
		if sp >= s.Threshold && tempEnd != 0 {
			tempEnd = 0
		}
		if sp >= s.Threshold && !triggered {
			triggered = true
			cur = Segment{Start: pos}
			continue
		}
		if sp < neg && triggered {
			if tempEnd == 0 {
				tempEnd = pos
			}
			if pos-tempEnd < minSilence {
				continue
			}
			cur.End = tempEnd
			if cur.End-cur.Start > minSpeech {
				out = append(out, cur)
			}
			cur, tempEnd, triggered = Segment{}, 0, false
		}
	}
	if triggered && audioLen-cur.Start > minSpeech {
		cur.End = audioLen
		out = append(out, cur)
	}
	for i := range out {
		if i == 0 {
			out[i].Start = max(0, out[i].Start-pad)
		}
		if i != len(out)-1 {
			silence := out[i+1].Start - out[i].End
			if silence < 2*pad {
				out[i].End += silence / 2
				out[i+1].Start = max(0, out[i+1].Start-silence/2)
			} else {
				out[i].End = min(audioLen, out[i].End+pad)
				out[i+1].Start = max(0, out[i+1].Start-pad)
			}
		} else {
			out[i].End = min(audioLen, out[i].End+pad)
		}
	}
	return out
}
