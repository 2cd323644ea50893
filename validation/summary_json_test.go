package validation

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// A summary without timed pairs is still JSON: its missing figures are
// null, the others as they are.
func TestSummaryJSON(t *testing.T) {
	b, err := json.Marshal(Summary{Cases: 1, MedianAbsErrAllocated: 0.25, PairsOrdered: math.NaN(), MedianAbsErrSeconds: math.NaN()})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Cases":1`, `"MedianAbsErrAllocated":0.25`, `"PairsOrdered":null`, `"MedianAbsErrSeconds":null`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no %s in %s", want, b)
		}
	}
}
