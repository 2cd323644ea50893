//go:build cgo && nvml

package smi

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type nvmlReader struct{}

// Open initialises NVML. Where the library cannot be loaded the error is
// ErrNoDriver.
func Open() (Reader, error) {
	switch ret := nvml.Init(); ret {
	case nvml.SUCCESS:
		return nvmlReader{}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("%w: NVML (libnvidia-ml.so.1) could not be loaded", ErrNoDriver)
	default:
		return nil, fmt.Errorf("starting NVML: %s", nvml.ErrorString(ret))
	}
}

func (nvmlReader) Close() error {
	if ret := nvml.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("stopping NVML: %s", nvml.ErrorString(ret))
	}
	return nil
}

func (nvmlReader) Read() ([]GPU, error) {
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %s", nvml.ErrorString(ret))
	}
	gpus := make([]GPU, 0, n)
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: %s", i, nvml.ErrorString(ret))
		}
		g := GPU{Index: i, Util: -1, MemUtil: -1}
		g.Name, _ = d.GetName()
		g.UUID, _ = d.GetUUID()
		mem, ret := d.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("GPU %d: memory: %s", i, nvml.ErrorString(ret))
		}
		g.Total, g.Used, g.Free = int64(mem.Total), int64(mem.Used), int64(mem.Free)
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.Util, g.MemUtil = int(u.Gpu), int(u.Memory)
		}
		seen := map[int]bool{}
		for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){d.GetComputeRunningProcesses, d.GetGraphicsRunningProcesses} {
			ps, ret := list()
			if ret != nvml.SUCCESS {
				continue
			}
			for _, p := range ps {
				pid := int(p.Pid)
				if seen[pid] {
					continue
				}
				seen[pid] = true
				used := int64(p.UsedGpuMemory)
				// NVML_VALUE_NOT_AVAILABLE: the driver cannot attribute memory
				if p.UsedGpuMemory == ^uint64(0) {
					used = -1
				}
				g.Processes = append(g.Processes, Process{PID: pid, Name: processName(pid), Used: used})
			}
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}
