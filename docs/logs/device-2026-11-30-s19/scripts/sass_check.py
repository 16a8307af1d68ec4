# sass_count.py (docs/logs/device-2026-11-30-s18/scripts) with the whole NVRTC/ptxas log (C7514,
# "wgmma serialized", shows there) and the wgmma-related SASS counted: QGMMA, WARPGROUP.ARRIVE,
# WARPGROUP.DEPBAR, and the register/spill line. Writes FILE.cu.cubin and FILE.cu.sass.
# LD_LIBRARY_PATH=/work/main/.tools/cuda13/lib python3 sass_check.py FILE.cu
import ctypes, sys, subprocess, collections, re
lib = ctypes.CDLL("/work/main/.tools/cuda13/lib/libnvrtc.so.13")
src = open(sys.argv[1]).read().encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, sys.argv[1].encode(), 0, None, None) == 0
opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"-default-device", b"-lineinfo", b"--include-path=/work/main/.tools/cuda13/include", b"-Xptxas=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
log = log.value.decode()
print("rc", rc)
print("\n".join(l for l in log.splitlines() if "Compile time" not in l and "gmem" not in l))
if rc == 0:
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); b = ctypes.create_string_buffer(n.value); lib.nvrtcGetCUBIN(prog, b)
    out = sys.argv[1] + ".cubin"; open(out, "wb").write(b.raw)
    sass = subprocess.run(["/work/main/.tools/cuda13/bin/nvdisasm", "-c", out], capture_output=True, text=True).stdout
    open(sys.argv[1] + ".sass", "w").write(sass)
    lines = [l.split("*/", 1)[1].strip() for l in sass.splitlines() if l.strip().startswith("/*") and "*/" in l and ";" in l]
    c = collections.Counter()
    for ins in lines:
        op = re.sub(r"^@!?U?P[0-7T] ", "", ins).split()[0] if ins else ""
        c[op.split(".")[0]] += 1
        if op.startswith("WARPGROUP"): c[op] += 1
    print("instructions", len(lines), {k: c[k] for k in ["QGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "WARPSYNC", "FFMA", "FMUL", "LDG", "STL", "LDL", "BRA", "SYNCS"]})
    print("gsb0 on QGMMA:", sum(1 for i in lines if i.split(" ")[0].startswith("QGMMA") and "gsb0" in i), "DEPBAR args:", collections.Counter(i.rstrip(" ;") for i in lines if i.startswith("WARPGROUP.DEPBAR")))
