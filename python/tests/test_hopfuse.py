"""The hopfuse package without a GPU (scripts/test-python.sh runs it against the installed wheel
and the project's torch stand-in, runner/peers/fake_torch): compiling to CUDA, the checks of a
call (count, dtype, rank, shape, device, contiguity, alignment, scalars), NVRTC and its disk
cache, the fake implementation and the custom op. A launch needs a GPU: here it must fail
saying so. With real torch and a GPU, scripts/python-device-check.sh runs the kernels.
"""

import os
import pathlib
import re
import shutil
import tempfile
import unittest

import hopfuse
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
NVRTC, DRIVER = hopfuse.available()
REQUIRE_NVRTC = os.environ.get("HOPFUSE_REQUIRE_NVRTC") == "1"


def example(path):
    return (ROOT / "examples" / path).read_text()


def cuda_tensor(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="cuda")


ADD_FUSION = example("basics/add.hf").split("schedule {")[0]
ADD_SCHEDULE = example("basics/add.hf").split("schedule {")[1].rsplit("}", 1)[0]


class CompileTest(unittest.TestCase):
    def test_the_signature_is_the_fusions(self):
        k = hopfuse.compile(example("basics/add.hf"))
        self.assertEqual(k.name, "add_kernel")
        self.assertEqual([i.name for i in k.inputs], ["a", "b"])
        self.assertEqual([o.name for o in k.outputs], ["c"])
        self.assertEqual(k.symbols, ["M", "N"])
        self.assertEqual(k.schema(), "(Tensor a, Tensor b) -> Tensor")
        self.assertEqual(repr(k), "<hopfuse.Kernel add_kernel(a: f32[M, N], b: f32[M, N]) -> c: f32[M, N]>")
        r = hopfuse.compile(example("basics/row_sum.hf"))
        self.assertEqual(repr(r), "<hopfuse.Kernel row_sum_kernel(x: f32[M, N]) -> s: f32[M]>")

    def test_cuda_for_sizes(self):
        k = hopfuse.compile(example("basics/add.hf"))
        cuda = k.cuda(M=1000, N=1000)
        self.assertIn('extern "C" __global__', cuda)
        self.assertIn("add_kernel", cuda)
        spec = k.specialize({"M": 1000, "N": 1000})
        self.assertEqual(spec.index_type[0], "i32")
        self.assertEqual(k.specialize({"M": 65536, "N": 65536}).index_type[0], "i64")
        self.assertEqual([t[:3] for t in spec.tensors], [("a", "input", "f32"), ("b", "input", "f32"), ("c", "output", "f32")])
        self.assertEqual(spec.tensors[2][3], [1000, 1000])
        grid, block, smem = spec.launch_dims
        self.assertEqual(block, [128, 1, 1])
        self.assertEqual(grid[0], -(-1000 * 1000 // 512))
        self.assertIn('"kernel_name": "add_kernel"', spec.plan_json)

    def test_a_schedule_given_apart_is_the_same_program(self):
        whole = hopfuse.compile(example("basics/add.hf")).cuda(M=64, N=64)
        for schedule in (ADD_SCHEDULE, "schedule {" + ADD_SCHEDULE + "}"):
            apart = hopfuse.compile(ADD_FUSION, schedule=schedule).cuda(M=64, N=64)
            self.assertEqual(apart, whole)
        with self.assertRaisesRegex(ValueError, "already has a schedule block"):
            hopfuse.compile(example("basics/add.hf"), schedule=ADD_SCHEDULE)
        # No schedule: the automatic one for the call's sizes, the same as asking for it.
        auto = hopfuse.compile(ADD_FUSION).cuda(M=64, N=64)
        self.assertIn("blockIdx.x", auto)
        self.assertEqual(hopfuse.compile(ADD_FUSION, schedule="auto").cuda(M=64, N=64), auto)
        with self.assertRaisesRegex(ValueError, 'schedule="auto" is for a program without a schedule block'):
            hopfuse.compile(example("basics/add.hf"), schedule="auto")

    def test_compile_errors_have_line_and_column(self):
        bad = ADD_FUSION.replace("c = a + b", "c = a + q")
        with self.assertRaises(hopfuse.CompileError) as e:
            hopfuse.compile(bad)
        self.assertRegex(str(e.exception), r"<program>:5:\d+")
        self.assertIn("q", str(e.exception))
        self.assertTrue(issubclass(hopfuse.CompileError, ValueError))
        with self.assertRaisesRegex(hopfuse.CompileError, r"<program>:\d+:\d+"):
            hopfuse.compile(ADD_FUSION, schedule="c.split(7, 4)")
        with self.assertRaisesRegex(TypeError, "program text"):
            hopfuse.compile(None)

    def test_sizes_the_plan_refuses_name_the_rule(self):
        k = hopfuse.compile(example("tma/add_2d.hf"))
        with self.assertRaisesRegex(ValueError, "rows of the tensor must be multiples of 16 bytes.*N = 1001 is not a multiple of 4"):
            k.specialize({"M": 64, "N": 1001})
        with self.assertRaisesRegex(ValueError, "index must be"):
            k.specialize({"M": 64, "N": 1024}, index="i16")


class CallChecksTest(unittest.TestCase):
    def setUp(self):
        self.add = hopfuse.compile(example("basics/add.hf"))

    def test_argument_count(self):
        with self.assertRaisesRegex(TypeError, r"takes 2 tensor arguments \(a, b\), got 1"):
            self.add(cuda_tensor((4, 8)))
        with self.assertRaisesRegex(TypeError, "input `b` must be a torch.Tensor, not list"):
            self.add(cuda_tensor((4, 8)), [1.0])

    def test_dtype(self):
        with self.assertRaises(hopfuse.DTypeError) as e:
            self.add(cuda_tensor((4, 8)), cuda_tensor((4, 8), torch.float16))
        self.assertIn("input `b` has dtype torch.float16; the fusion declares b: f32[M, N]", str(e.exception))
        self.assertTrue(issubclass(hopfuse.DTypeError, TypeError))

    def test_rank_and_shape(self):
        with self.assertRaisesRegex(hopfuse.ShapeError, r"input `a` has rank 3 \(shape \[2, 4, 8\]\); the fusion declares a: f32\[M, N\] \(rank 2\)"):
            self.add(cuda_tensor((2, 4, 8)), cuda_tensor((4, 8)))
        with self.assertRaisesRegex(
            hopfuse.ShapeError, re.escape("input `b` has shape [4, 7]: dimension 1 is 7 but N = 8 (from a.shape[1])")
        ):
            self.add(cuda_tensor((4, 8)), cuda_tensor((4, 7)))
        with self.assertRaisesRegex(hopfuse.ShapeError, r"M = 0 \(from a.shape\[0\]\): every size must be at least 1"):
            self.add(cuda_tensor((0, 8)), cuda_tensor((0, 8)))

    def test_placement(self):
        with self.assertRaisesRegex(ValueError, "input `a` is on cpu; hopfuse kernels run on CUDA tensors"):
            self.add(torch.empty((4, 8)), cuda_tensor((4, 8)))
        a, b = cuda_tensor((4, 8)), cuda_tensor((4, 8))
        b.is_contiguous = lambda: False
        with self.assertRaisesRegex(hopfuse.ShapeError, r"input `b` is not contiguous .*pass b.contiguous\(\)"):
            self.add(a, b)
        a, b = cuda_tensor((4, 8)), cuda_tensor((4, 8))
        a._address += 4
        with self.assertRaisesRegex(ValueError, "input `a` is at address 0x[0-9a-f]+, not a multiple of 16 bytes"):
            self.add(a, b)

    def test_a_repeated_call_is_checked_too(self):
        # The second call with the same shapes takes the cached path: contiguity and alignment
        # are still checked on every call.
        a, b = cuda_tensor((4, 8)), cuda_tensor((4, 8))
        try:
            self.add(a, b)
        except RuntimeError:
            pass  # no GPU (or no NVRTC) here: the call was checked and remembered before the launch
        self.assertEqual(len(self.add._calls), 1)
        a._address += 4
        with self.assertRaisesRegex(ValueError, "input `a` is at address 0x[0-9a-f]+, not a multiple of 16 bytes"):
            self.add(a, b)
        a._address -= 4
        b.is_contiguous = lambda: False
        with self.assertRaisesRegex(hopfuse.ShapeError, r"input `b` is not contiguous"):
            self.add(a, b)

    def test_a_kernel_takes_no_stray_keywords(self):
        with self.assertRaisesRegex(TypeError, "kernel `add_kernel` has no scalar input `eps` \\(its scalars: none\\)"):
            self.add(cuda_tensor((4, 8)), cuda_tensor((4, 8)), eps=1e-5)

    @unittest.skipIf(DRIVER, "a GPU driver is loaded here: the device check runs kernels")
    def test_a_launch_without_a_gpu_says_so(self):
        if not NVRTC and not REQUIRE_NVRTC:
            self.skipTest("no NVRTC (scripts/setup-nvrtc.sh)")
        with self.assertRaisesRegex(RuntimeError, "libcuda.so.1. cannot be loaded: launching a kernel needs"):
            self.add(cuda_tensor((4, 8)), cuda_tensor((4, 8)))


@unittest.skipIf(DRIVER, "a GPU driver is loaded here: the stand-in's addresses must not be launched")
class SegmentedCallTest(unittest.TestCase):
    """A fusion no scheduler takes whole (auto/col_norm: the column sums, then the division)
    runs as its segments' kernels in order, the intermediate written by the first read by the
    second. Each segment's call is replaced by a recorder giving its fake outputs (no GPU here)."""

    def test_the_segments_run_in_order_on_the_intermediates(self):
        k = hopfuse.compile(example("auto/col_norm.hf"))
        self.assertEqual([s.name for s in k.segments], ["col_norm_s1_kernel", "col_norm_s2_kernel"])
        self.assertIn("column", k.segmented_because)
        calls = []
        for seg in k.segments:

            def record(*tensors, seg=seg, **scalars):
                out = seg.fake(*tensors, **scalars)
                calls.append((seg.name, [t.data_ptr() for t in tensors], out))
                return out

            seg._call = record
        x = cuda_tensor((64, 32))
        y = k(x)
        (s1, s1_in, sums), (s2, s2_in, y2) = calls
        self.assertEqual((s1, s2), ("col_norm_s1_kernel", "col_norm_s2_kernel"))
        self.assertEqual(s1_in, [x.data_ptr()])
        # The division reads x and the column sums the first kernel wrote.
        self.assertEqual(sorted(s2_in), sorted([x.data_ptr(), sums.data_ptr()]))
        self.assertIs(y, y2)
        self.assertEqual(tuple(y.shape), (64, 32))
        self.assertEqual(tuple(sums.shape), (32,))
        # The whole fusion's checks name the user's tensor.
        with self.assertRaisesRegex(hopfuse.DTypeError, "input `x` has dtype torch.float16"):
            k(cuda_tensor((64, 32), torch.float16))
        with self.assertRaisesRegex(ValueError, "runs as 2 kernels"):
            k.specialize({"M": 64, "N": 32})
        cuda = k.cuda(M=64, N=32)
        self.assertIn("// ==== kernel 2 of 2: col_norm_s2_kernel", cuda)


@unittest.skipIf(DRIVER, "a GPU driver is loaded here: the stand-in's addresses must not be launched")
class CachedCallTest(unittest.TestCase):
    """A repeated call launches through what its first call prepared: the inputs' addresses then
    the outputs', the scalars in the launcher's order (the program's values unless given). The
    launch itself is replaced by a recorder (no GPU here)."""

    PROGRAM = (
        "fusion two {\n  input x: f32[N]\n  input s: f32 = 2.0\n"
        "  y = x * s\n  z = x + s\n  output y\n  output z\n}\n"
    )

    def test_addresses_and_scalars_reach_the_launch(self):
        k = hopfuse.compile(self.PROGRAM)
        x = cuda_tensor((64,))
        with self.assertRaises(RuntimeError):
            k(x)  # prepared and remembered, then the launch fails without a GPU
        (call,) = k._calls.values()
        self.assertEqual(call.scalar_names, ("s",))
        launches = []
        call.launch = lambda stream, addresses, scalars: launches.append((addresses, scalars))
        call.bind()
        y, z = k(x)
        self.assertEqual([tuple(t.shape) for t in (y, z)], [(64,), (64,)])
        self.assertEqual(y.device, x.device)
        self.assertEqual(launches[-1], ([x.data_ptr(), y.data_ptr(), z.data_ptr()], [2.0]))
        y, z = k(x, s=3)
        self.assertEqual(launches[-1], ([x.data_ptr(), y.data_ptr(), z.data_ptr()], [3.0]))
        # Another shape is a new call, checked in full.
        with self.assertRaisesRegex(hopfuse.DTypeError, "input `x` has dtype torch.float16"):
            k(cuda_tensor((64,), torch.float16))
        with self.assertRaisesRegex(TypeError, "scalar `s` \\(f32\\) must be a number, not str"):
            k(x, s="3")
        self.assertEqual(len(launches), 2)

    def test_every_parameter_finds_its_address(self):
        # The kernel's parameters: input b (input a is not read), a workspace, output y, a
        # scratch buffer, output z. A launch gives a, b, then y, z, the workspace, the scratch.
        buffers = [
            ("input", "f32", (8,), 1),
            ("workspace", "f32", (4,), None),
            ("output", "f32", (8,), None),
            ("scratch", "f32", (2,), None),
            ("output", "f16", (8,), None),
        ]
        allocated, address_of = hopfuse._launch_layout(buffers, 2)
        self.assertEqual(allocated, [buffers[2], buffers[4], buffers[1], buffers[3]])
        self.assertEqual(address_of, [1, 4, 2, 5, 3])

    def test_a_scalar_without_a_value_must_be_given_every_call(self):
        k = hopfuse.compile(self.PROGRAM.replace("input s: f32 = 2.0", "input s: f32"))
        x = cuda_tensor((64,))
        with self.assertRaises(RuntimeError):
            k(x, s=1.0)
        (call,) = k._calls.values()
        self.assertIsNone(call.defaults)
        call.launch = lambda stream, addresses, scalars: None
        call.bind()
        with self.assertRaisesRegex(TypeError, "needs the scalar keyword argument `s` \\(f32\\)"):
            k(x)


class ScalarTest(unittest.TestCase):
    """A scalar input (rank 0) is a keyword argument."""

    PROGRAM = "fusion scale {\n  input x: f32[N]\n  input s: f32\n  y = x * s\n  output y\n}\n"

    def kernel(self):
        return hopfuse.compile(self.PROGRAM)

    def test_a_value_the_program_gives_is_the_default(self):
        k = hopfuse.compile(self.PROGRAM.replace("input s: f32", "input s: f32 = 2.5"))
        self.assertEqual(k.schema(), "(Tensor x, *, float s=2.5) -> Tensor")
        self.assertEqual(k._scalar_values({}), {"s": 2.5})
        self.assertEqual(k._scalar_values({"s": 3.0}), {"s": 3.0})

    def test_scalars_are_keywords(self):
        k = self.kernel()
        self.assertEqual(k.schema(), "(Tensor x, *, float s) -> Tensor")
        self.assertEqual(repr(k), "<hopfuse.Kernel scale_kernel(x: f32[N], s: f32) -> y: f32[N]>")
        self.assertEqual(tuple(k.fake(torch.empty((8,), device="meta"), s=2.0).shape), (8,))
        with self.assertRaisesRegex(TypeError, "kernel `scale_kernel` needs the scalar keyword argument `s` \\(f32\\)"):
            k(cuda_tensor((8,)))
        with self.assertRaisesRegex(TypeError, "scalar `s` \\(f32\\) must be a number, not str"):
            k(cuda_tensor((8,)), s="2")


class NvrtcTest(unittest.TestCase):
    def setUp(self):
        if not NVRTC:
            if REQUIRE_NVRTC:
                self.fail("HOPFUSE_REQUIRE_NVRTC=1 but libnvrtc cannot be loaded")
            self.skipTest("no NVRTC (scripts/setup-nvrtc.sh)")

    def test_cubins_are_compiled_once_and_cached_on_disk(self):
        cache = pathlib.Path(os.environ["HOPFUSE_CACHE_DIR"])
        shutil.rmtree(cache, ignore_errors=True)
        k = hopfuse.compile(example("matmul/step3_warp_specialized.hf"))
        spec = k.specialize({"M": 256, "N": 256, "K": 128})
        cubin = spec.cubin()
        self.assertEqual(cubin[:4], b"\x7fELF")
        files = list(cache.glob("*.cubin"))
        self.assertEqual(len(files), 1)
        self.assertEqual(files[0].read_bytes(), cubin)
        # Ragged sizes lower to the same CUDA: the same CUBIN.
        other = k.specialize({"M": 200, "N": 136, "K": 72})
        self.assertEqual(other.cuda, spec.cuda)
        self.assertEqual(other.cubin(), cubin)
        self.assertEqual(len(list(cache.glob("*.cubin"))), 1)


class TransformerBlockTest(unittest.TestCase):
    """python/examples/transformer_block.py's programs compile to CUDA (and, with NVRTC, to a
    CUBIN) for every kernel call of the block at the shape it runs on the device: batch 8 x seq
    1024 tokens, hidden 2048, MLP 5632."""

    def test_the_blocks_kernels_compile_for_its_shapes(self):
        import importlib.util

        path = ROOT / "python" / "examples" / "transformer_block_programs.py"
        spec = importlib.util.spec_from_file_location("transformer_block_programs", path)
        programs = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(programs)
        kernels = {name: hopfuse.compile(text, schedule) for name, (text, schedule) in programs.programs(2048).items()}
        self.assertEqual(
            repr(kernels["rmsnorm"]),
            "<hopfuse.Kernel rmsnorm_auto_kernel(x: bf16[M, 2048], w: bf16[2048], eps: f32) -> y: bf16[M, 2048]>",
        )
        self.assertEqual(repr(kernels["swiglu"]), "<hopfuse.Kernel swiglu_kernel(gate: bf16[M, N], up: bf16[M, N]) -> out: bf16[M, N]>")
        calls = programs.kernel_sizes(8 * 1024, 2048, 5632)
        self.assertEqual([name for name, _ in calls].count("matmul"), 5)
        cubins = set()
        for name, sizes in calls:
            s = kernels[name].specialize(sizes)
            self.assertIn('extern "C" __global__', s.cuda, name)
            self.assertEqual(s.index_type[0], "i32", (name, sizes))
            if NVRTC:
                cubin = s.cubin()
                self.assertEqual(cubin[:4], b"\x7fELF", (name, sizes))
                cubins.add(cubin)
        if NVRTC:
            # rmsnorm, residual_add, swiglu, and the product (one CUDA source at every size).
            self.assertEqual(len(cubins), 4)
        script = ROOT / "python" / "examples" / "transformer_block.py"
        compile(script.read_text(), str(script), "exec")  # the device script is valid Python


class FakeAndOpTest(unittest.TestCase):
    def test_the_fake_implementation_gives_the_outputs_shapes(self):
        r = hopfuse.compile(example("basics/row_sum.hf"))
        x = torch.empty((37, 1000), dtype=torch.float32, device="meta")
        s = r.fake(x)
        self.assertEqual(tuple(s.shape), (37,))
        self.assertEqual(s.dtype, torch.float32)
        self.assertEqual(s.device, torch.device("meta"))
        m = hopfuse.compile(example("matmul/step3_warp_specialized.hf"))
        c = m.fake(torch.empty((100, 64), dtype=torch.bfloat16), torch.empty((48, 64), dtype=torch.bfloat16))
        self.assertEqual((tuple(c.shape), c.dtype), ((100, 48), torch.bfloat16))
        with self.assertRaisesRegex(hopfuse.ShapeError, "dimension 1 is 32 but K = 64"):
            m.fake(torch.empty((100, 64), dtype=torch.bfloat16), torch.empty((48, 32), dtype=torch.bfloat16))

    def test_torch_op_registers_a_custom_op_with_its_fake(self):
        op = hopfuse.torch_op("hopfuse_test::row_sum", example("basics/row_sum.hf"))
        self.assertIs(torch.ops.hopfuse_test.row_sum, op)
        self.assertEqual(op._schema, "(Tensor x) -> Tensor")
        out = op._abstract_fn(torch.empty((5, 16), dtype=torch.float32, device="meta"))
        self.assertEqual(tuple(out.shape), (5,))
        with self.assertRaises(hopfuse.DTypeError):
            op._abstract_fn(torch.empty((5, 16), dtype=torch.float16, device="meta"))
        with self.assertRaisesRegex(ValueError, "namespace::op_name"):
            hopfuse.torch_op("row_sum", example("basics/row_sum.hf"))


if __name__ == "__main__":
    cache = tempfile.mkdtemp(prefix="hopfuse-cache-")
    os.environ["HOPFUSE_CACHE_DIR"] = cache
    try:
        unittest.main()
    finally:
        shutil.rmtree(cache, ignore_errors=True)
