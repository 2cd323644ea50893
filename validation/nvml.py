#!/usr/bin/env python3
"""The device's memory as NVML counts it, for validation/measure.py.

NVML needs no CUDA context, so measure.py reads the device before PyTorch
makes one (the context's own size is the difference). pynvml where it is
installed, else ctypes on libnvidia-ml, else the nvidia-smi command.
Standard library only.
"""

import ctypes
import os
import subprocess

# ==============================================================================================
# NVML (no CUDA context needed): pynvml, else ctypes on libnvidia-ml, else nvidia-smi.


class _NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class NVML:
    def __init__(self):
        self.source = None
        self.index = None
        self.match = None
        self._pynvml = None
        self._lib = None
        self._handle = None
        idx, uuid = self._visible_device()
        try:
            import pynvml
            pynvml.nvmlInit()
            if uuid:
                h = self._by_uuid(pynvml, uuid)
                self.match = "CUDA_VISIBLE_DEVICES uuid"
            else:
                h = pynvml.nvmlDeviceGetHandleByIndex(idx)
                self.match = "index guess"
            self._pynvml, self._handle, self.index, self.source = pynvml, h, idx, "pynvml"
            return
        except Exception:
            pass
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                h = ctypes.c_void_p()
                if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(idx), ctypes.byref(h)) == 0:
                    self._lib, self._handle, self.index = lib, h, idx
                    self.source, self.match = "ctypes-nvml", "index guess"
                    return
        except Exception:
            pass
        if self._smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits",
                      "-i", str(idx)]) is not None:
            self.source, self.index, self.match = "nvidia-smi", idx, "index guess"

    @staticmethod
    def _by_uuid(pynvml, uuid):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except Exception:  # older pynvml wants bytes
            return pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())

    @staticmethod
    def _visible_device():
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if vis.startswith("GPU-"):
            return 0, vis
        try:
            return int(vis), None
        except ValueError:
            return 0, None

    @staticmethod
    def _smi(args):
        try:
            out = subprocess.run(["nvidia-smi"] + args, capture_output=True, text=True,
                                 timeout=30)
            return out.stdout if out.returncode == 0 else None
        except Exception:
            return None

    def rebind_uuid(self, uuid):
        """Once torch knows the device's UUID, make sure NVML looks at the same device."""
        if self._pynvml is None or not uuid:
            return
        try:
            u = uuid if uuid.startswith("GPU-") else "GPU-" + uuid
            self._handle = self._by_uuid(self._pynvml, u)
            self.match = "uuid"
        except Exception:
            pass

    def device_memory(self):
        """{"total", "used", "free"} in bytes for the whole device, or None."""
        try:
            if self._pynvml is not None:
                m = self._pynvml.nvmlDeviceGetMemoryInfo(self._handle)
                return {"total": int(m.total), "used": int(m.used), "free": int(m.free)}
            if self._lib is not None:
                m = _NvmlMemory()
                if self._lib.nvmlDeviceGetMemoryInfo(self._handle, ctypes.byref(m)) == 0:
                    return {"total": m.total, "used": m.used, "free": m.free}
            if self.source == "nvidia-smi":
                out = self._smi(["--query-gpu=memory.total,memory.used,memory.free",
                                 "--format=csv,noheader,nounits", "-i", str(self.index)])
                t, u, f = [int(v) * 1048576 for v in out.strip().split(",")]
                return {"total": t, "used": u, "free": f}
        except Exception:
            pass
        return None

    def process_used(self, pid):
        """(bytes this process uses on the device per NVML, how the process was matched)."""
        try:
            procs = []
            if self._pynvml is not None:
                for p in self._pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                    procs.append((int(p.pid), p.usedGpuMemory))
            elif self.source in ("nvidia-smi", "ctypes-nvml"):
                out = self._smi(["--query-compute-apps=pid,used_memory",
                                 "--format=csv,noheader,nounits"])
                for line in (out or "").strip().splitlines():
                    a, b = line.split(",")
                    procs.append((int(a), int(b) * 1048576))
            for p, used in procs:
                if p == pid and used is not None:
                    return int(used), "pid"
            if len(procs) == 1 and procs[0][1] is not None:
                # Containers see other PID namespaces; a lone compute process is this one.
                return int(procs[0][1]), "only-process"
        except Exception:
            pass
        return None, None

    def driver_version(self):
        try:
            if self._pynvml is not None:
                v = self._pynvml.nvmlSystemGetDriverVersion()
                return v.decode() if isinstance(v, bytes) else v
            if self._lib is not None:
                buf = ctypes.create_string_buffer(96)
                if self._lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0:
                    return buf.value.decode()
            out = self._smi(["--query-gpu=driver_version", "--format=csv,noheader"])
            return out.strip().splitlines()[0] if out else None
        except Exception:
            return None
