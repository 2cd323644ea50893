package suggest

import (
	"reflect"
	"testing"
)

func TestDistance(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"relu", "relu", 0}, {"rleu", "relu", 1}, {"resnet5o", "resnet50", 1},
		{"kitten", "sitting", 3}, {"", "abc", 3}, {"ab", "ba", 1},
	}
	for _, c := range cases {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	names := []string{"resnet18", "resnet50", "resnet101", "vgg16", "vit_b_16", "gpt2"}
	cases := []struct {
		s    string
		want []string
	}{
		{"resnet5O", []string{"resnet50", "resnet18"}},
		{"VIT-B-16", []string{"vit_b_16"}},
		{"gtp2", []string{"gpt2"}},
		{"bert", nil},
		{"max_split_size", nil},
	}
	for _, c := range cases {
		if got := Nearest(c.s, names, 2); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Nearest(%q) = %v, want %v", c.s, got, c.want)
		}
	}
	keys := []string{"max_split_size_mb", "expandable_segments", "garbage_collection_threshold"}
	if got := Nearest("max_split_size", keys, 1); !reflect.DeepEqual(got, []string{"max_split_size_mb"}) {
		t.Errorf("prefix: %v", got)
	}
	long := string(make([]byte, 10000))
	if got := Nearest(long, keys, 1); got != nil {
		t.Errorf("hostile length: %v", got)
	}
}
