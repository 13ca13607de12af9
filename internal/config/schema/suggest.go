package schema

import "strings"

var separators = strings.NewReplacer("_", "", "-", "")

// suggest returns the known name closest to a misspelt one, or "" when
// none is close: same letters ignoring case, '_' and '-' (table_size,
// TableSize), the singular for a plural or the other way round
// (community, communities), or at most two edits away for longer names.
func suggest(name string, known []string) string {
	norm := func(s string) string { return strings.ToLower(separators.Replace(s)) }
	for _, k := range known {
		if norm(k) == norm(name) {
			return k
		}
	}
	for _, k := range known {
		if singular(norm(k)) == singular(norm(name)) {
			return k
		}
	}
	best, bestDist := "", 0
	for _, k := range known {
		limit := 1
		if len(k) >= 6 {
			limit = 2
		}
		dist := editDistance(strings.ToLower(name), strings.ToLower(k))
		if dist <= limit && (best == "" || dist < bestDist) {
			best, bestDist = k, dist
		}
	}
	return best
}

// singular strips an English plural ending: communities, peers.
func singular(s string) string {
	if stem, ok := strings.CutSuffix(s, "ies"); ok {
		return stem + "y"
	}
	return strings.TrimSuffix(s, "s")
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent bytes each cost
// one, so "weigth" is one edit from "weight".
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		// Field names are short; anything this long is no typo of one.
		return max(len(a), len(b))
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
