package kit_test

import (
	"slices"
	"testing"

	"github.com/sluicemq/sluice/adapters/kit"
)

// TestRankSingleActive: the holder ranks first however recent; otherwise
// the member waiting longest; a malformed claim last.
func TestRankSingleActive(t *testing.T) {
	first, second, third := kit.NewSingleActive(), kit.NewSingleActive(), kit.NewSingleActive()
	claims := map[string][]byte{"c": third.Claim(), "b": second.Claim(), "a": first.Claim(), "z": []byte("junk")}
	if got := kit.RankSingleActive(claims); !slices.Equal(got, []string{"a", "b", "c", "z"}) {
		t.Fatalf("no holder: %v, want the longest waiting first", got)
	}
	third.SetActive(true)
	claims["c"] = third.Claim()
	if got := kit.RankSingleActive(claims); got[0] != "c" {
		t.Fatalf("with a holder: %v, want c (the holder) first", got)
	}
	if got := kit.RankSingleActive(map[string][]byte{"y": first.Claim(), "x": first.Claim()}); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("equal claims: %v, want the smallest id first", got)
	}
	if got := kit.RankSingleActive(nil); len(got) != 0 {
		t.Fatalf("no members: %v", got)
	}
}
