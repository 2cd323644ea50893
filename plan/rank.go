package plan

// The order of the plans: the keys that rank them and bound the search.

func (cb *combo) changesResults() bool { return cb.resultChanges() > 0 }

func (cb *combo) resultChanges() int { return btoi(cb.tune != FullTune) + btoi(cb.optim != "") }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// less orders keys: plans that change what is trained or how it is
// optimised after those that do not (and those that change both after
// those that change one), then by the objective.
func less(a, b [3]float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func (pl *planner) planKey(p *Plan) [3]float64 {
	rc := float64(p.resultChanges())
	if pl.o.Objective == FewestChanges {
		return [3]float64{rc, float64(len(p.Changes)), p.Seconds}
	}
	return [3]float64{rc, 0, p.Seconds}
}

func (pl *planner) comboKeyAt(cb *combo, i int) ([3]float64, error) {
	t, err := pl.timeAt(cb, i)
	if err != nil {
		return [3]float64{}, err
	}
	rc := float64(cb.resultChanges())
	if pl.o.Objective == FewestChanges {
		n := cb.changes + btoi(pl.accs[i] != pl.base.Accumulate)
		return [3]float64{rc, float64(n), t}, nil
	}
	return [3]float64{rc, 0, t}, nil
}
