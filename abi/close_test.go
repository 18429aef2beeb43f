package abi

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestCloseCodeTableAdvice: docs/operations.md's table of close codes
// gives, for every code, the reconnect advice CloseCode.Reconnect gives,
// and lists every code the host sends.
func TestCloseCodeTableAdvice(t *testing.T) {
	const doc = "../docs/operations.md"
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	rows := closeCodeRows(t, string(data))
	if len(rows) < 8 {
		t.Fatalf("%s: found %d rows in the close code table, want the whole table", doc, len(rows))
	}
	seen := map[CloseCode]bool{}
	for _, r := range rows {
		for _, c := range r.codes {
			seen[c] = true
			switch r.advice {
			case "yes", "no":
				if want := r.advice == "yes"; c.Reconnect() != want {
					t.Errorf("%s:%d: code %d: the doc says reconnect %s, Reconnect() = %v", doc, r.line, c, r.advice, c.Reconnect())
				}
			case "the application says":
				if c.Reconnect() {
					t.Errorf("%s:%d: code %d is the application's, but Reconnect() advises it", doc, r.line, c)
				}
			default:
				t.Errorf("%s:%d: reconnect %q: want yes, no or the application says", doc, r.line, r.advice)
			}
		}
	}
	for _, c := range []CloseCode{CloseNormal, CloseProtocolError, CloseAbnormal, CloseInvalidData, ClosePolicyViolation,
		CloseTooBig, CloseInternalError, CloseServiceRestart, CloseTryAgainLater, CloseSlowReader} {
		if !seen[c] {
			t.Errorf("%s: close code %v has no row", doc, c)
		}
	}
}

type closeRow struct {
	line   int
	codes  []CloseCode
	advice string
}

// closeCodeRows reads the rows of the table under "### Close codes": a
// code, or a range of codes ("3000–4999 (not 4008)", read as its ends and
// its middle), and the reconnect column.
func closeCodeRows(t *testing.T, doc string) []closeRow {
	t.Helper()
	var rows []closeRow
	in, col := false, -1
	for i, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "### "):
			in = line == "### Close codes"
			continue
		case !in || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		if cells[0] == "code" {
			for j, c := range cells {
				if c == "reconnect" {
					col = j
				}
			}
			if col < 0 {
				t.Fatalf("line %d: the close code table has no reconnect column", i+1)
			}
			continue
		}
		r := closeRow{line: i + 1, advice: cells[col]}
		field := strings.Fields(cells[0])[0]
		if lo, hi, ok := strings.Cut(field, "–"); ok {
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA != nil || errB != nil || a >= b {
				t.Fatalf("line %d: code range %q", i+1, field)
			}
			r.codes = []CloseCode{CloseCode(a), CloseCode((a + b) / 2), CloseCode(b)}
		} else {
			n, err := strconv.Atoi(field)
			if err != nil {
				t.Fatalf("line %d: code %q", i+1, field)
			}
			r.codes = []CloseCode{CloseCode(n)}
		}
		rows = append(rows, r)
	}
	return rows
}

func TestCloseCodeString(t *testing.T) {
	for c, want := range map[CloseCode]string{
		CloseServiceRestart: "1012 (service restart)",
		CloseSlowReader:     "4008 (slow reader)",
		4003:                "4003",
	} {
		if got := c.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint16(c), got, want)
		}
	}
}

func TestValidGuestCloseCode(t *testing.T) {
	for code, want := range map[int]bool{1000: true, 3000: true, 4999: true, 4008: true, 1001: false, 1012: false, 2999: false, 5000: false, -1: false, 1000 + 1<<16: false} {
		if got := ValidGuestCloseCode(code); got != want {
			t.Errorf("ValidGuestCloseCode(%d) = %v, want %v", code, got, want)
		}
	}
}
