package predict

// Need is the device total a prediction needs. For one screened out before
// the allocator ran, it is its requested peak with the CUDA context; for
// one that ran out of memory, the larger of what the failing request asked
// for (the capacity less the headroom it lacked) and the requested peak of
// the whole step (which the simulator knows past the failure) with the
// context: a lower bound, since the allocator rounds and caches on top.
func Need(r *Result) int64 {
	if r.Screened {
		return r.Summary.PeakRequested + r.Context
	}
	if r.Timeline.OOM != nil {
		return max(r.GPU.Capacity-r.Headroom(), r.Summary.PeakRequested+r.Context)
	}
	return r.DeviceTotal
}
