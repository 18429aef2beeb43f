package limits

import (
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, 7}, {-3, 7}, {Off, 7}, {1, 1}, {9, 9}} {
		v := c.in
		Default(&v, 7)
		if v != c.want {
			t.Errorf("Default(%d, 7) = %d, want %d", c.in, v, c.want)
		}
	}
	var pages uint32
	Default(&pages, 4096)
	if pages != 4096 {
		t.Errorf("Default(uint32 0, 4096) = %d", pages)
	}
}

func TestDefaultOrOff(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, time.Second}, {Off, Off}, {-time.Minute, Off}, {time.Millisecond, time.Millisecond},
	} {
		v := c.in
		DefaultOrOff(&v, time.Second)
		if v != c.want {
			t.Errorf("DefaultOrOff(%v, 1s) = %v, want %v", c.in, v, c.want)
		}
		if IsOff(v) != (c.want == Off) {
			t.Errorf("IsOff(%v) = %v", v, IsOff(v))
		}
	}
	// A limit that is off by default stays off until it is set.
	n := 0
	DefaultOrOff(&n, Off)
	if !IsOff(n) {
		t.Errorf("DefaultOrOff(0, Off) = %d, want off", n)
	}
	rate := 2.5
	DefaultOrOff(&rate, 100)
	if rate != 2.5 {
		t.Errorf("DefaultOrOff(2.5, 100) = %v", rate)
	}
}
