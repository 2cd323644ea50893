package gpu

import "testing"

// Every catalog GPU has its interconnect with a source, and a size given
// --like a catalog GPU takes its link: multi-GPU step times need it.
func TestLinks(t *testing.T) {
	for _, g := range All() {
		l := g.Link
		if !l.Known() || l.Source == "" || l.Host <= 0 {
			t.Errorf("%s: link %+v, want a rate, a host rate and a source", g.Name, l)
		}
		// NVLink per direction is half the datasheet's both-ways figure:
		// never above 900 GB/s (NVLink 5)
		if l.Intra > 900e9 || l.NVLink && (l.Inter <= 0 || l.NVLinks <= 0) || l.Major != g.Major {
			t.Errorf("%s: intra %g B/s, NVLink %v, inter %g", g.Name, l.Intra, l.NVLink, l.Inter)
		}
	}
	c, err := LookupLike("80GB", "h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Lookup("h100-80gb")
	if c.Link != h.Link || h.Link.Major != 9 || h.Link.NVLinks != 18 {
		t.Errorf("a size like h100-80gb has link %+v", c.Link)
	}
	if c, _ := Lookup("80GB"); c.Link.Known() {
		t.Error("a bare size has a link")
	}
}
