package alloc

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(*Config)) Config {
		c := DefaultConfig()
		f(&c)
		return c
	}
	tests := []struct {
		in   string
		want Config
	}{
		{"", def},
		{"max_split_size_mb:128", with(func(c *Config) { c.MaxSplitSize = 128 * MiB })},
		// 20 is the minimum (>= kLargeBuffer/1MiB in c10/core/AllocatorConfig.cpp).
		{"max_split_size_mb:20", with(func(c *Config) { c.MaxSplitSize = 20 * MiB })},
		// Spaces are dropped everywhere; a trailing comma is accepted.
		{" max_split_size_mb : 64 , expandable_segments : True ,", with(func(c *Config) {
			c.MaxSplitSize = 64 * MiB
			c.ExpandableSegments = true
		})},
		{"expandable_segments:False", def},
		{"garbage_collection_threshold:0.6,max_split_size_mb:64", with(func(c *Config) {
			c.GarbageCollectionThreshold = 0.6
			c.MaxSplitSize = 64 * MiB
		})},
		{"max_non_split_rounding_mb:512", with(func(c *Config) { c.MaxNonSplitRounding = 512 * MiB })},
		// The single-number form applies to every interval.
		{"roundup_power2_divisions:4", with(func(c *Config) { c.RoundupPower2Divisions = all(4) })},
		// List form, MB keys: 256 is interval 8 and also fills 0..7; 512 is
		// interval 9; ">" fills from the last key's interval, 9 included,
		// so 9 ends up 8, not 2 (the parser's fill starts at last_index).
		{"roundup_power2_divisions:[256:1,512:2,>:8]", with(func(c *Config) {
			c.RoundupPower2Divisions = [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8}
		})},
		{"roundup_power2_divisions:[64:8,256:4,1024:4,>:1]", with(func(c *Config) {
			c.RoundupPower2Divisions = [16]int{8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 1, 1, 1, 1, 1, 1}
		})},
		// Keys above 32768 MB clamp to the last interval.
		{"roundup_power2_divisions:[1:2,65536:4]", with(func(c *Config) {
			c.RoundupPower2Divisions = [16]int{2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4}
		})},
		{"roundup_power2_divisions:[]", def},
		// Accepted and dropped: they do not touch device memory.
		{"backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:True,pinned_num_register_threads:8", def},
		{"pinned_use_background_threads:False,pinned_reserve_segment_size_mb:64,graph_capture_record_stream_reuse:True", def},
		// std::stoi reads a leading integer and ignores the rest.
		{"max_split_size_mb:128MB", with(func(c *Config) { c.MaxSplitSize = 128 * MiB })},
		// A later key wins.
		{"max_split_size_mb:128,max_split_size_mb:256", with(func(c *Config) { c.MaxSplitSize = 256 * MiB })},
	}
	for _, tc := range tests {
		got, err := ParseConfig(tc.in)
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseConfig(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ParseConfig(%q) gives invalid config: %v", tc.in, err)
		}
		back, err := ParseConfig(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q via %q = %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"max_split_size:128", []string{`"max_split_size"`, `did you mean "max_split_size_mb"`}},
		{"expandable_segment:True", []string{`did you mean "expandable_segments"`}},
		{"garbage_collection:0.5", []string{`did you mean "garbage_collection_threshold"`}},
		{"roundup_power2_division:4", []string{`did you mean "roundup_power2_divisions"`}},
		{"max_split_size_mb:19", []string{"max_split_size_mb", "too small", ">= 20"}},
		{"max_non_split_rounding_mb:10", []string{"max_non_split_rounding_mb", "too small"}},
		{"max_split_size_mb:abc", []string{"max_split_size_mb", `"abc" is not an integer`}},
		{"max_split_size_mb:-64", []string{"max_split_size_mb", "negative"}},
		{"max_split_size_mb:99999999999", []string{"max_split_size_mb", "not an integer"}},
		{"max_split_size_mb", []string{"max_split_size_mb", `expected ":"`}},
		{"max_split_size_mb:", []string{"max_split_size_mb", "missing value"}},
		{"max_split_size_mb:128 expandable_segments:True", []string{"max_split_size_mb", `expected ","`}},
		{"garbage_collection_threshold:1.5", []string{"garbage_collection_threshold", "(0.0, 1.0)"}},
		{"garbage_collection_threshold:0", []string{"garbage_collection_threshold"}},
		{"garbage_collection_threshold:x", []string{"garbage_collection_threshold", "not a number"}},
		{"expandable_segments:true", []string{"expandable_segments", "True/False"}},
		{"expandable_segments:1", []string{"expandable_segments", "True/False"}},
		{"backend:cudaMallocAsync", []string{"cudaMallocAsync is not simulated"}},
		{"backend:foo", []string{"backend", "unknown allocator backend"}},
		{"roundup_power2_divisions:3", []string{"roundup_power2_divisions", "power of 2"}},
		{"roundup_power2_divisions:0", []string{"roundup_power2_divisions", "power of 2"}},
		{"roundup_power2_divisions:[256:3]", []string{"roundup_power2_divisions", "power of 2 or 0"}},
		{"roundup_power2_divisions:[300:2]", []string{"roundup_power2_divisions", `interval "300"`}},
		{"roundup_power2_divisions:[256:2", []string{"roundup_power2_divisions", `missing "]"`}},
		{"roundup_power2_divisions:[256:2;512:4]", []string{"roundup_power2_divisions"}},
		{"pinned_num_register_threads:3", []string{"pinned_num_register_threads", "power of 2"}},
		{"pinned_num_register_threads:256", []string{"pinned_num_register_threads", "128"}},
		{",max_split_size_mb:128", []string{`unexpected ","`}},
		{"release_lock_on_cudamalloc:yes", []string{"release_lock_on_cudamalloc", "True/False"}},
	}
	for _, tc := range tests {
		_, err := ParseConfig(tc.in)
		if err == nil {
			t.Errorf("ParseConfig(%q) succeeded", tc.in)
			continue
		}
		msg := err.Error()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("ParseConfig(%q) = %q, want it to contain %q", tc.in, msg, w)
			}
		}
		if msg != strings.ToLower(msg[:1])+msg[1:] {
			t.Errorf("error not lower-case: %q", msg)
		}
	}
}

func TestConfigString(t *testing.T) {
	tests := []struct {
		c    Config
		want string
	}{
		{DefaultConfig(), ""},
		{Config{}, ""},
		{Config{MaxSplitSize: 128 * MiB, ExpandableSegments: true}, "max_split_size_mb:128,expandable_segments:True"},
		{Config{GarbageCollectionThreshold: 0.8, RoundupPower2Divisions: all(4)}, "roundup_power2_divisions:4,garbage_collection_threshold:0.8"},
		{Config{MaxSplitSize: 64 * MiB, MaxNonSplitRounding: 512 * MiB}, "max_split_size_mb:64,max_non_split_rounding_mb:512"},
		{Config{RoundupPower2Divisions: [16]int{1, 1, 1, 1, 1, 1, 1, 1, 1, 8, 8, 8, 8, 8, 8, 8}}, "roundup_power2_divisions:[256:1,512:8,>:8]"},
		{Config{RoundupPower2Divisions: [16]int{0, 2}}, "roundup_power2_divisions:[1:0,2:2,4:0,>:0]"},
	}
	for _, tc := range tests {
		if got := tc.c.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.c, got, tc.want)
		}
		back, err := ParseConfig(tc.c.String())
		want := tc.c
		if want.MaxNonSplitRounding == 0 {
			want.MaxNonSplitRounding = LargeBuffer
		}
		if err != nil || back != want {
			t.Errorf("ParseConfig(%q) = %+v, %v; want %+v", tc.c.String(), back, err, want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{MaxSplitSize: 10 * MiB},
		{MaxSplitSize: -1},
		{MaxNonSplitRounding: MiB},
		{GarbageCollectionThreshold: 1},
		{GarbageCollectionThreshold: -0.5},
		{RoundupPower2Divisions: [16]int{3}},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v validated", c)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Error(err)
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"", "max_split_size_mb:128", "roundup_power2_divisions:[256:1,512:2,>:8]",
		"expandable_segments:True,garbage_collection_threshold:0.5", "backend:native",
		"roundup_power2_divisions:[", "max_split_size_mb:20,", ":,[]", "pinned_num_register_threads:4",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseConfig(s)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig(%q) = %+v, invalid: %v", s, c, err)
		}
		back, err := ParseConfig(c.String())
		if err != nil || back != c {
			t.Fatalf("ParseConfig(%q) = %+v; String %q parses to %+v, %v", s, c, c.String(), back, err)
		}
	})
}
