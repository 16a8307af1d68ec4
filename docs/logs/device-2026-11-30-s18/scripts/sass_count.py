import ctypes, sys, subprocess, os
lib = ctypes.CDLL("/work/main/.tools/cuda13/lib/libnvrtc.so.13")
src = open(sys.argv[1]).read().encode()
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, sys.argv[1].encode(), 0, None, None) == 0
opts = [b"--gpu-architecture=sm_90a", b"-std=c++17", b"-default-device", b"-lineinfo", b"--include-path=/work/main/.tools/cuda13/include", b"-Xptxas=-v"]
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value); lib.nvrtcGetProgramLog(prog, log)
print("rc", rc); print(log.value.decode()[-1500:])
if rc == 0:
    lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)); b = ctypes.create_string_buffer(n.value); lib.nvrtcGetCUBIN(prog, b)
    out = sys.argv[1] + ".cubin"; open(out, "wb").write(b.raw)
    sass = subprocess.run(["/work/main/.tools/cuda13/bin/nvdisasm", "-c", out], capture_output=True, text=True).stdout
    open(sys.argv[1] + ".sass", "w").write(sass)
    lines = [l for l in sass.splitlines() if l.strip().startswith("/*") and "*/" in l and ";" in l]
    import collections
    c = collections.Counter()
    for l in lines:
        ins = l.split("*/",1)[1].strip().lstrip("@!P0123456789T ").split()[0] if l.split("*/",1)[1].strip() else ""
        c[ins.split(".")[0]] += 1
    print("instructions", len(lines), {k: c[k] for k in ["MUFU","FMUL","FFMA","FADD","FMNMX","LDG","STL","LDL"]})
