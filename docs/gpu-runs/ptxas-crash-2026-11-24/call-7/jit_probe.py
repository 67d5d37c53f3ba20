# Does the CUDA driver's JIT crash on a PTX file, in-process (cuModuleLoadDataEx) or
# through the linker (cuLinkAddData + cuLinkComplete)? Each mode runs in a child process.
import ctypes, subprocess, sys

def child(mode, path, opt):
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int(); assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    ctx = ctypes.c_void_p(); assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    ptx = open(path, "rb").read() + b"\0"
    n = 0; opts = None; vals = None
    if opt is not None:  # CU_JIT_OPTIMIZATION_LEVEL = 7
        n = 1; opts = (ctypes.c_int * 1)(7); vals = (ctypes.c_void_p * 1)(opt)
    if mode == "load":
        mod = ctypes.c_void_p()
        print("cuModuleLoadDataEx rc", cuda.cuModuleLoadDataEx(ctypes.byref(mod), ptx, n, opts, vals), flush=True)
    else:
        st = ctypes.c_void_p()
        print("cuLinkCreate rc", cuda.cuLinkCreate_v2(n, opts, vals, ctypes.byref(st)), flush=True)
        print("cuLinkAddData rc", cuda.cuLinkAddData_v2(st, 1, ptx, len(ptx), b"k.ptx", 0, None, None), flush=True)
        cub = ctypes.c_void_p(); sz = ctypes.c_size_t()
        print("cuLinkComplete rc", cuda.cuLinkComplete(st, ctypes.byref(cub), ctypes.byref(sz)), sz.value, flush=True)

if len(sys.argv) > 1 and sys.argv[1] == "child":
    child(sys.argv[2], sys.argv[3], None if sys.argv[4] == "default" else int(sys.argv[4]))
    sys.exit(0)
path = sys.argv[1]
for mode in ["load", "link"]:
    for opt in ["default", "4", "3", "1"]:
        r = subprocess.run([sys.executable, __file__, "child", mode, path, opt], capture_output=True, text=True)
        print(f"{mode} opt={opt}: exit {r.returncode} | {r.stdout.strip()} | {r.stderr.strip()[-200:]}", flush=True)
